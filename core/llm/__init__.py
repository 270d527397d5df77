"""LLM agents: an OpenAI-compatible client with retries and cost, the problem brief, the tools and the agent."""

from core.llm.agent import LlmAgent
from core.llm.client import LlmClient, LlmDown, LlmReply, LlmUnavailable, ToolsRejected

__all__ = ["LlmAgent", "LlmClient", "LlmDown", "LlmReply", "LlmUnavailable", "ToolsRejected"]
