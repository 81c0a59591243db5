"""The noisy-reward study of ``verl-rfpp curves --task noisy``: its task (``task``: designs,
tokenizer, model, data, the probe), reward (``reward``, the file verl loads by path), runs
(``runs``), analysis (``analysis``: summaries, the verdict's rule, the noise's part, matched
progress, arms), report (``report`` and ``sections``: results.json, plots, report.md, docs/bandit.md's
paragraphs), the command (``command``) and the SGD own-rate arm's plan (``plan``). Importing this
package imports none of them."""
