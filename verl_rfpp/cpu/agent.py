"""A toy tool for verl's multi-turn ``tool_agent`` loop on the tiny model (``demo --multi-turn``),
and a toy agent loop whose sessions return several outputs (``SESSION_LOOP``).

A random 28K-parameter model never writes a well-formed tool call, so the ``rfpp_toy`` tool-call
parser reads one call of ``digit_hint`` out of every first assistant turn; verl's real
``ToolAgentLoop`` then runs the tool, appends its answer as a ``tool`` message (tokens with
``response_mask`` 0) and lets the model answer again. Every response so has an interior mask
hole, as tool-calling runs on a GPU do. Registered (``register_agent_loops()``) in every verl process by
``verl_rfpp.cpu.backend``; importing this module registers nothing."""

from __future__ import annotations

from typing import Any, Optional

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

PARSER = "rfpp_toy"
SESSION_LOOP = "rfpp_two_outputs"  # actor_rollout_ref.rollout.agent.default_agent_loop
TOOL = "digit_hint"
TOOL_CONFIG = f"""tools:
  - class_name: {__name__}.DigitHintTool
    config:
      type: native
    tool_schema:
      type: function
      function:
        name: {TOOL}
        description: Says what a good answer looks like.
        parameters:
          type: object
          properties: {{}}
          required: []
"""


class ToyToolParser(ToolParser):
    """Every assistant turn calls ``digit_hint`` once (verl stops after ``max_assistant_turns``)."""

    async def extract_tool_calls(self, responses_ids: list[int], tools: Optional[list] = None
                                 ) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        return text, [FunctionCall(name=TOOL, arguments="{}")]


class DigitHintTool(BaseTool):
    """Answers every call with the same short hint."""

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
                      ) -> tuple[ToolResponse, float, dict]:
        return ToolResponse(text="digits"), 0.0, {}


class TwoOutputAgentLoop(SingleTurnAgentLoop):
    """A toy context-compressing agent for verl 0.9.1's v1 trainer: a session with an even
    ``session_id`` answers, drops that turn from its context and answers again, returning both
    outputs (verl stores each as its own row and copies the final output's reward onto the
    first); a session with an odd ``session_id`` answers once. So a prompt's group mixes sessions
    of one and two outputs (docs/contract.md section 3.7)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        first = await super().run(sampling_params, **kwargs)
        if int(kwargs.get("session_id", 1)) % 2:
            return first
        return [first, await super().run(sampling_params, **kwargs)]


def register_agent_loops() -> None:
    """Put the toy parser and the session loop in verl's registries (``verl_rfpp.cpu.backend`` does, at import)."""
    ToolParser.register(PARSER)(ToyToolParser)
    register_agent_loop(SESSION_LOOP)(TwoOutputAgentLoop)
