"""Two processes under torchrun (gloo, CPU): a few DDP steps, a checkpoint, an eval and an export."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def test_torchrun_two_processes(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    if not Path(torchrun).exists():
        pytest.skip("torchrun not found")
    run_dir = tmp_path / "ddp"
    command = [
        torchrun, "--standalone", "--nproc_per_node=2", "-m", "unlimited_ocr.train", "--run-dir", str(run_dir),
        "--steps", "3", "--batch-size", "4", "--warmup", "1", "--curriculum", "0:1", "--eval-samples", "2",
        "--hidden", "64", "--layers", "2", "--sam-patch", "16", "--window", "8", "--threads", "1",
        "--ctc-frames", "4", "--eval-every", "0", "--checkpoint-every", "0", "--log-every", "1",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # Own process group: on a timeout the workers die with torchrun instead of lingering after the test.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail("torchrun did not finish in 240 s:\n" + stdout[-3000:] + stderr[-3000:])
    assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert train[-1]["samples"] == 12
    assert any(r["kind"] == "eval" for r in records)
    assert (run_dir / "checkpoints" / "step-0000003" / "trainer_state.pt").exists()
    assert (run_dir / "export" / "model.safetensors").exists()
