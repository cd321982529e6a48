"""Temporary folders named after their process: a killed process's are removed by the next one
(evolver.tempdirs)."""
import os
import signal
import subprocess
import sys
import tempfile

from evolver import tempdirs

MAKE = ("import sys, time; from evolver import tempdirs; "
        "print(tempdirs.make('evolver-sbx-'), flush=True); time.sleep(60)")


def start(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", MAKE], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    return proc, proc.stdout.readline().strip()


def test_a_killed_processs_folders_go_with_the_next_folder_made_and_a_live_ones_stay(tmp_path, monkeypatch):
    killed, gone = start(tmp_path)
    live, kept = start(tmp_path)
    try:
        open(os.path.join(gone, "left-behind"), "w").close()
        assert os.path.basename(gone).startswith(f"evolver-sbx-{killed.pid}-")
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert os.path.isdir(gone)  # a process killed so cannot remove its own
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        other = tempdirs.make("evolver-ray-")  # another prefix leaves these alone
        assert os.path.isdir(gone) and os.path.basename(other).startswith(f"evolver-ray-{os.getpid()}-")
        mine = tempdirs.make("evolver-sbx-")
        assert not os.path.exists(gone) and os.path.isdir(kept) and os.path.isdir(mine)
        assert os.path.isdir(other)
    finally:
        live.kill()
        live.wait()
