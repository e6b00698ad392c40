"""The environment-variable install path (capture.install() with RANK/WORLD_SIZE and DECODER_SHELL_CAPTURE_*)
with its own control server, and the vLLM general-plugin entry point, which only patches vLLM and
installs nothing by itself (tests/test_capture_vllm.py covers what it patches)."""

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

PROBE = r"""
import json, os, sys, urllib.request, urllib.error
from importlib.metadata import entry_points
from decoder_shell import capture
ep = [e for e in entry_points(group="vllm.general_plugins") if e.name == "decoder_shell_capture"][0]
ep.load()()
out = {"by_entry_point": capture.installed() is not None}
if os.environ.get("DECODER_SHELL_CAPTURE") == "1":
    try:
        capture.install()
    except Exception as e:
        out["error"] = str(e)
p = capture.installed()
out["installed"] = p is not None
if p is not None:
    control = json.load(open(os.path.join(os.environ["DECODER_SHELL_CAPTURE_DIR"], "control.json")))
    token = open(control["token_file"]).read().strip()
    def get(tok):
        req = urllib.request.Request(control["url"] + "/capture/info")
        req.add_header("Authorization", "Bearer " + tok)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, None
    out.update(url=control["url"], right=get(token), wrong=get("x" + token)[0],
               mode=oct(os.stat(control["token_file"]).st_mode & 0o777))
print(json.dumps(out))
"""


def _probe(tmp_path, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DECODER_SHELL") and k not in ("RANK", "WORLD_SIZE")}
    e.update(env)
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=e)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_entry_point_is_declared():
    assert any(e.value == "decoder_shell.capture.vllm:register" for e in entry_points(group="vllm.general_plugins"))


def test_without_the_switch_nothing_is_installed(tmp_path):
    assert _probe(tmp_path, RANK="0", WORLD_SIZE="1", DECODER_SHELL_CAPTURE_DIR=str(tmp_path))["installed"] is False


def test_switched_on_rank_0_serves_an_authenticated_loopback_endpoint(tmp_path):
    out = _probe(tmp_path, DECODER_SHELL_CAPTURE="1", RANK="0", WORLD_SIZE="1",
                 DECODER_SHELL_CAPTURE_DIR=str(tmp_path / "run"),
                 DECODER_SHELL_CAPTURE_TOKEN_FILE=str(tmp_path / "token"))
    assert not out["by_entry_point"]  # the entry point installs nothing in a process vLLM has not set up
    assert out["installed"] and out["url"].startswith("http://127.0.0.1:")
    status, info = out["right"]
    assert status == 200 and info["ranks"] == 1 and info["state"] == "idle" and info["geometry"] is None
    assert out["wrong"] == 401 and out["mode"] == "0o600"


def test_a_process_without_a_rank_stays_uninstalled(tmp_path):
    out = _probe(tmp_path, DECODER_SHELL_CAPTURE="1", DECODER_SHELL_CAPTURE_DIR=str(tmp_path))
    assert out["installed"] is False and "RANK and WORLD_SIZE" in out["error"]


SERVE = r"""
import os, sys, time
from decoder_shell import capture
capture.install()
print("ready", flush=True)
time.sleep(120)
"""


def test_shell_capture_against_a_bare_plugin_endpoint(tmp_path):
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECODER_SHELL")}
    env.update(RANK="0", WORLD_SIZE="1", DECODER_SHELL_CAPTURE_DIR=str(run),
               DECODER_SHELL_CAPTURE_TOKEN_FILE=str(tmp_path / "token"))
    svc = subprocess.Popen([sys.executable, "-c", SERVE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        assert svc.stdout.readline().strip() == "ready"
        url = json.loads((run / "control.json").read_text())["url"]
        base = [sys.executable, "-m", "decoder_shell.cli", "capture", "--from-service", url,
                "--token-file", str(tmp_path / "token"), "--out", str(tmp_path / "c")]
        r = subprocess.run(base, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "declares no geometry" in r.stderr and "Traceback" not in r.stderr
        r = subprocess.run([*base, "--preset", "tiny"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--wait" in r.stderr and "Traceback" not in r.stderr
        r = subprocess.run([*base, "--preset", "tiny", "--wait", "--timeout", "1"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and "still pending" in r.stderr and "disarmed" in r.stderr
    finally:
        svc.kill()
        svc.wait()
