"""The verl adapter: the only package that knows verl's internals (docs/contract.md sections 6-8).

Importing any module of it changes nothing in verl: ``verl_rfpp.plugin``, the module the
``verl.plugins`` entry point names, is the one whose import applies every patch of
``table.TABLE`` (one record per change to verl; the wrappers live in the module of their verl
subsystem):

- ``config``: wraps ``verl.utils.config.validate_config`` so ``main_ppo`` refuses a violating
  config before Ray starts (section 6) and fails when our estimators are not the ones registered;
- ``registries``: replaces verl's ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline``
  registry entries, and ``actor_loss`` registers the ``rfpp`` policy loss (section 5), right
  after verl first imports ``core_algos`` (the table's post-import finder: importing it from here
  would cost every verl process about 1 s);
- ``actor_loss``: verl's ``ppo_loss`` selects the masked inputs of an ``rfpp`` actor (section
  1.3; verl's k2 term multiplies by the mask), wrapped when verl imports its losses module;
- ``engine``: the ``rfpp`` actor loss's response mean divides by the mini-batch's responses, not
  by verl's row count (``BaseEngine.train_batch``, wrapped when verl's engine module is imported);
- ``tracking``: ``Tracking.log`` (when verl imports it) passes the ``rfpp/`` metrics to verl's
  loggers (section 7);
- ``runtime_env``: the Ray job of a run of ours loads the plugin on every node (section 8.6);
- ``workers``: a run of ours checks, before its first rollout, that every worker runs this plugin
  at the driver's version (section 8.4);
- ``sessions``: in verl's v1 advantage step, an estimator of the group family
  (REINFORCE++-baseline) counts each agent session once in its prompt's group mean (section 3.7).

Each patch states the verl internals it relies on and checks all of them before it changes
anything (``verl_rfpp.adapter.patching``): a verl that moved one gets that patch recorded as failed,
never half-patched, and the activation guard refuses our estimators naming the internal. verl
swallows plugin load errors at DEBUG level, so every failure here is logged at ERROR on logger
``verl_rfpp`` (at activation, before it propagates; in a post-import patch, instead of failing verl's
import). ``deactivate()`` undoes all of it, every binding included (tests).
"""
