"""A real single-node SLURM cluster for the tests of the `slurm` tier (tests/test_slurm_cluster.py):
munged, MariaDB with slurmdbd, slurmctld and slurmd on this machine, each on a free port of
127.0.0.1, their configuration, state and logs in a temporary folder. The session fixture
`slurm_cluster` starts it once (once per xdist worker that runs such a test) and stops it after
the session, its jobs cancelled first. `.ci/slurm` installs the Debian packages it runs.

Accounting (slurmdbd, on MariaDB) is there because submitit reads its jobs' states with
`sacct`: without it, a job that ends without a result (cancelled, killed at its time limit)
would be waited for forever. The cluster can also be started by hand, to try the launcher:
`python tests/slurm_cluster.py` starts one and prints its SLURM_CONF; Ctrl-C stops it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PARTITION = "harness"
# What the cluster runs, and what the tests ask it with (/usr/sbin is not on every PATH).
DAEMONS = ("munged", "mariadb-install-db", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
START_S = 60  # each daemon's start, at most
STOP_S = 30  # the jobs' end once cancelled, then each daemon's, at most
PACKAGES = "Debian's slurm-wlm slurmdbd munge mariadb-server, as .ci/slurm installs them"


def missing_binaries() -> list[str]:
    return [name for name in DAEMONS + COMMANDS if shutil.which(name, path=SEARCH_PATH) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Cluster:
    """The daemons of one cluster in `folder`; `env`: this process's environment with the
    cluster's SLURM_CONF, for any SLURM command meant for it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.user = getpass.getuser()
        self.ports = {name: free_port() for name in ("mariadb", "slurmdbd", "slurmctld", "slurmd")}
        self.conf = folder / "slurm.conf"
        self.munge_socket = folder / "munge.socket"
        self.env = {
            **os.environ,
            "PATH": SEARCH_PATH,
            "SLURM_CONF": str(self.conf),  # slurmdbd finds slurmdbd.conf beside it
        }
        self.daemons: list[tuple[str, subprocess.Popen]] = []

    # --- commands --------------------------------------------------------------------------

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """A SLURM command's output (sbatch, squeue, scontrol, ...) on this cluster."""
        result = subprocess.run(
            args, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {result.stderr.strip() or result.stdout}")
        return result.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` of a job (an array task: `<array>_<index>`), as key: value
        (finished jobs stay MinJobAge seconds)."""
        text = self.run("scontrol", "show", "job", "--oneliner", job_id)
        return dict(field.split("=", 1) for field in text.split() if "=" in field)

    def queue(self, name: str) -> dict[str, str]:
        """The jobs in the queue named `name`, each array task by its id: its state."""
        text = self.run("squeue", "--array", "--noheader", f"--name={name}", "--format=%i %T")
        return dict(line.split() for line in text.splitlines() if line.strip())

    # --- start and stop --------------------------------------------------------------------

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in ("state", "spool"):
            (self.folder / name).mkdir(exist_ok=True)
        self._start_munge()
        self._start_mariadb()
        self._write_conf()
        self._daemon("slurmdbd", "slurmdbd", "-D")
        self._wait(lambda: accepts(self.ports["slurmdbd"]), "slurmdbd")
        self._daemon("slurmctld", "slurmctld", "-D", "-i")
        self._wait(lambda: "UP" in self.run("scontrol", "ping", check=False), "slurmctld")
        self._daemon("slurmd", "slurmd", "-D", "-N", self.node)
        self._wait(self._node_idle, "slurmd")

    def stop(self) -> None:
        """Cancel the cluster's jobs, wait for them to end, then stop its daemons (slurmd first,
        munged last); a daemon that outlives STOP_S seconds is killed."""
        if any(name == "slurmctld" for name, _ in self.daemons):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.run("scancel", f"--user={self.user}")
                self._wait(lambda: not self.run("squeue", "--noheader").strip(), "jobs", STOP_S)
        for _, process in reversed(self.daemons):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.daemons.clear()

    def _daemon(self, name: str, *args: str) -> None:
        """Start a daemon in the foreground of its own session (Ctrl-C in the tests does not
        reach it; `stop` does), its output into <name>.out."""
        with open(self.folder / f"{name}.out", "ab") as out:
            process = subprocess.Popen(
                [shutil.which(args[0], path=SEARCH_PATH), *args[1:]],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.daemons.append((name, process))

    def _wait(self, ready: Callable[[], object], what: str, timeout: float = START_S) -> None:
        """Wait until `ready()`; a daemon that exits meanwhile, or a wait of `timeout` seconds,
        raises with the end of its log."""
        deadline = time.monotonic() + timeout
        while not ready():
            ended = [(name, p.returncode) for name, p in self.daemons if p.poll() is not None]
            if ended or time.monotonic() > deadline:
                name = ended[0][0] if ended else what
                problem = f"exited with {ended[0][1]}" if ended else f"not ready in {timeout} s"
                raise RuntimeError(f"SLURM cluster: {name} {problem}:\n{self.log_tail(name)}")
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 20) -> str:
        logs = [self.folder / f"{name}.out", self.folder / f"{name}.log"]
        text = "".join(p.read_text(errors="replace") for p in logs if p.exists())
        return "\n".join(text.splitlines()[-lines:])

    def _start_munge(self) -> None:
        """munged with a key of its own (MUNGE authenticates every message of the daemons)."""
        key = self.folder / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self._daemon(
            "munged",
            "munged",
            "--foreground",
            "--force",  # a socket in a folder only its owner reaches (pytest's: 0700)
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={self.folder / 'munged.pid'}",
            f"--seed-file={self.folder / 'munged.seed'}",
        )
        self._wait(self.munge_socket.exists, "munged")

    def _start_mariadb(self) -> None:
        """A throwaway MariaDB for slurmdbd: its own data and temporary folders (two clusters
        at once, of two xdist workers, would share /tmp's), 127.0.0.1 only, no grant tables (no
        users to set up), small InnoDB files."""
        data, scratch = self.folder / "mariadb", self.folder / "mariadb-tmp"
        scratch.mkdir(exist_ok=True)
        small = [f"--tmpdir={scratch}", "--innodb-log-file-size=4M"]
        install = [
            shutil.which("mariadb-install-db", path=SEARCH_PATH),
            "--no-defaults",
            f"--datadir={data}",
            f"--user={self.user}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *small,
        ]
        with open(self.folder / "mariadb.out", "ab") as out:
            subprocess.run(install, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=120)
        self._daemon(
            "mariadb",
            "mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            f"--user={self.user}",
            "--bind-address=127.0.0.1",
            f"--port={self.ports['mariadb']}",
            f"--socket={self.folder / 'mariadb.socket'}",
            "--skip-grant-tables",
            *small,
        )
        self._wait(lambda: accepts(self.ports["mariadb"]), "mariadb")

    @property
    def node(self) -> str:
        return socket.gethostname().split(".")[0]

    def _node_idle(self) -> bool:
        return self.run("sinfo", "--noheader", "--format=%t", check=False).strip() == "idle"

    def _write_conf(self) -> None:
        """slurm.conf, and slurmdbd.conf beside it (readable by its owner only, or slurmdbd
        refuses it)."""
        write_settings(self.conf, self._slurm_settings())
        dbd_conf = self.folder / "slurmdbd.conf"
        write_settings(dbd_conf, self._slurmdbd_settings())
        dbd_conf.chmod(0o600)

    def _slurm_settings(self) -> dict[str, object]:
        f = self.folder
        return {
            "ClusterName": "harness",
            "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmUser": self.user,
            "SlurmctldPort": self.ports["slurmctld"],
            "SlurmdPort": self.ports["slurmd"],
            "AuthType": "auth/munge",
            # cred_expire: also the seconds a requeued job waits before it may start again (120)
            "AuthInfo": f"socket={self.munge_socket},cred_expire=10",
            "CredType": "cred/munge",
            "StateSaveLocation": f / "state",
            "SlurmdSpoolDir": f / "spool",
            "SlurmctldPidFile": f / "slurmctld.pid",
            "SlurmdPidFile": f / "slurmd.pid",
            "SlurmctldLogFile": f / "slurmctld.log",
            "SlurmdLogFile": f / "slurmd.log",
            "ProctrackType": "proctrack/linuxproc",  # no cgroups needed
            "TaskPlugin": "task/none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core_Memory",
            "DefMemPerCPU": 1024,  # a job that asks no memory does not take the node's
            # pending jobs looked at every second, not every minute (a requeued job waits less)
            "SchedulerParameters": "sched_interval=1,bf_interval=1",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/slurmdbd",
            "AccountingStorageHost": "127.0.0.1",
            "AccountingStoragePort": self.ports["slurmdbd"],
            "AccountingStoragePass": self.munge_socket,  # the munged of slurmdbd's messages
            "MpiDefault": "none",
            "MailProg": "/bin/true",  # none is installed
            "MinJobAge": 3600,  # `scontrol show job` of a finished job, for an hour
            "KillWait": 2,  # SIGKILL 2 s after a cancelled job's SIGTERM
            "OverTimeLimit": 0,  # a job ends at its time limit (SLURM checks every 30 s)
            "InactiveLimit": 0,
            "JobRequeue": 1,  # a batch job may be requeued (submitit's `scontrol requeue`)
            "ReturnToService": 2,  # slurmd's node is up once it registers
            "NodeName": f"{self.node} {node_hardware()} NodeAddr=127.0.0.1 State=UNKNOWN",
            "PartitionName": f"{PARTITION} Nodes={self.node} Default=YES State=UP",
        }

    def _slurmdbd_settings(self) -> dict[str, object]:
        return {
            "AuthType": "auth/munge",
            "AuthInfo": f"socket={self.munge_socket}",
            "DbdHost": "localhost",
            "DbdAddr": "127.0.0.1",
            "DbdPort": self.ports["slurmdbd"],
            "SlurmUser": self.user,
            "StorageType": "accounting_storage/mysql",
            "StorageHost": "127.0.0.1",
            "StoragePort": self.ports["mariadb"],
            "StorageUser": self.user,
            "StorageLoc": "slurm_acct_db",
            "LogFile": self.folder / "slurmdbd.log",
            "PidFile": self.folder / "slurmdbd.pid",
        }


def node_hardware() -> str:
    """This machine's CPUs, sockets, cores and memory as slurmd finds them (`slurmd -C`), as
    slurm.conf's node line takes them: "CPUs=2 Boards=1 ... RealMemory=24105"."""
    slurmd = shutil.which("slurmd", path=SEARCH_PATH)
    found = subprocess.run([slurmd, "-C"], capture_output=True, text=True, check=True, timeout=30)
    return " ".join(found.stdout.splitlines()[0].split()[1:])  # after NodeName=<host>


def write_settings(path: Path, settings: dict[str, object]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A running single-node cluster (skipped where SLURM's binaries are not installed)."""
    missing = missing_binaries()
    if missing:
        pytest.skip(f"no SLURM cluster: {', '.join(missing)} not installed ({PACKAGES})")
    if os.geteuid() != 0:
        pytest.skip("no SLURM cluster: slurmd runs as root, and so must these tests")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


if __name__ == "__main__":  # a cluster to try the launcher by hand
    import tempfile

    with tempfile.TemporaryDirectory(prefix="slurm") as folder:
        cluster = Cluster(Path(folder))
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops it as Ctrl-C
        try:
            cluster.start()
            print(f"export SLURM_CONF={cluster.conf}  # partition {PARTITION}; Ctrl-C stops it")
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            cluster.stop()
