"""A throwaway PostgreSQL server for the distributed-tuning tests and benchmarks: initdb and pg_ctl into a
temporary folder, listening on a Unix socket there only, stopped (and the folder removed) at the end.

initdb refuses to run as root: started by root (as CI is), the server runs as the ``postgres`` user, else
``nobody``, and the folder is theirs."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

PORT = 5432  # the socket's name only: it lives in this server's own folder, so no other server can clash


def bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, else Debian's /usr/lib/postgresql/<version>/bin (the newest)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


def _server_user() -> str | None:
    """The unprivileged user to run the server as when this process is root, else None (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a postgres nor a nobody user exists to run PostgreSQL as")


class PostgresServer:
    def __init__(self, bindir: Path, *, fsync: bool = False):
        self.bindir = bindir
        self.user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="luminal-pg-"))
        self.data = self.root / "data"
        self.fsync = fsync
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd] if shutil.which("runuser") else \
                ["su", "-s", "/bin/sh", self.user, "-c", " ".join(f"'{c}'" for c in cmd)]
        proc = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=120)
        if check and proc.returncode:
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {proc.stderr[-2000:] or proc.stdout[-2000:]}")
        return proc

    def start(self) -> PostgresServer:
        if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
            raise RuntimeError("/dev/null is not the null device (something replaced it with a file): initdb and "
                               "pg_ctl cannot run as another user")
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        opts = f"-c listen_addresses='' -c unix_socket_directories='{self.root}' -p {PORT} -c max_connections=200"
        if not self.fsync:
            opts += " -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.root / "log"),
                  "-o", opts)
        return self

    def stop(self) -> None:
        self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data), check=False)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.root}&port={PORT}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(host=str(self.root), port=PORT, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def server_cpu_s(self) -> float:
        """CPU seconds the server's processes have used so far: the postmaster's own and its ended children's, and
        those of every backend alive."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        total = 0.0
        for proc in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = Path(proc).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if proc == f"/proc/{pid}/stat":
                total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            elif int(fields[1]) == pid:
                total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")
