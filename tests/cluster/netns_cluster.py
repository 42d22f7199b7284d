"""A two-host Ray cluster on one machine: two network namespaces (head, worker) joined by a veth pair and a bridge.

Everything lives in one private subnet (`SUBNET`, addresses set only inside the namespaces made here): a moto S3
server and a fault-injecting proxy in front of it (`fault_proxy.py`) on the head address, a Ray head with one
CPU, a Ray worker with one CPU. Processes are started with `ip netns exec`, each in its own session, and ended
by pid: every process in one of this cluster's namespaces (`ip netns pids`) was started here, so it is ours to
kill. Nothing outside the namespaces is touched, and `close()` removes them whatever happened.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.s3_server import S3_ENVIRONMENT

REPOSITORY = Path(__file__).resolve().parents[2]
VENV_BIN = REPOSITORY / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python")
SUBNET = "10.231.77"  # /24; unused by the machine (checked by `subnet_is_free`)
HEAD_ADDRESS = f"{SUBNET}.1"
WORKER_ADDRESS = f"{SUBNET}.2"
GCS_PORT = 6380
DASHBOARD_PORT = 8265
MOTO_PORT = 5000
PROXY_PORT = 5001
BUCKET = "lsc"


def run(command: list[str], timeout_s: float = 60, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, **kwargs)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} -> {result.returncode}: "
                           f"{result.stdout[-2000:]} {result.stderr[-2000:]}")
    return result


def cannot_make_namespaces() -> str | None:
    """Why this machine cannot host the cluster, or None."""
    if os.geteuid() != 0:
        return "multihost tests need root (network namespaces)"
    if shutil.which("ip") is None:
        return "multihost tests need iproute2's `ip`"
    if not (VENV_BIN / "ray").exists():
        return "multihost tests need .venv/bin/ray"
    if not subnet_is_free():
        return f"{SUBNET}.0/24 is already used on this machine"
    probe = f"lscprobe{os.getpid()}"
    made = run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    run(["ip", "netns", "delete", probe], check=False)
    return None


def subnet_is_free() -> bool:
    text = run(["ip", "-4", "addr"]).stdout + run(["ip", "-4", "route"]).stdout
    return f"{SUBNET}." not in text


def environment(token_path: Path) -> dict[str, str]:
    """The caller's environment without its Ray and AWS settings, plus this cluster's token and fake S3 keys."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAY_", "AWS_"))}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(S3_ENVIRONMENT, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=str(token_path))
    return env


class NetnsCluster:
    def __init__(self, tag: str | None = None):
        self.tag = tag or f"lsc{os.getpid()}"
        self.head_ns = f"{self.tag}h"
        self.worker_ns = f"{self.tag}w"
        self.temp_root = Path(f"/tmp/{self.tag}")
        self.log_dir = self.temp_root / "logs"
        self.proxy_mode_file = self.temp_root / "proxy_mode"
        self.token_path = self.temp_root / "auth_token"
        self.small_disk = self.temp_root / "full"
        self.small_disk_problem: str | None = "not mounted"
        self.namespaces: list[str] = []
        self.processes: list[subprocess.Popen] = []
        self.endpoint = f"http://{HEAD_ADDRESS}:{PROXY_PORT}"  # what jobs use: through the proxy
        self.direct_endpoint = f"http://{HEAD_ADDRESS}:{MOTO_PORT}"

    # ----- network -----
    def make_network(self) -> None:
        self.temp_root.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self.token_path.write_text(secrets.token_hex(32))
        self.token_path.chmod(0o600)
        self.add_namespace(self.head_ns)
        # the head's address is on a bridge of its own namespace, not on the veth: when the worker host is killed
        # its namespace goes, and with it both ends of the veth; an address on the head's end would go too, and
        # with it the head, moto and the proxy (they listen on that address)
        self.ns(self.head_ns, ["ip", "link", "add", "name", "br0", "type", "bridge"])
        self.ns(self.head_ns, ["ip", "addr", "add", f"{HEAD_ADDRESS}/24", "dev", "br0"])
        self.ns(self.head_ns, ["ip", "link", "set", "br0", "up"])
        self.add_namespace(self.worker_ns)
        self.link_worker()

    def add_namespace(self, namespace: str) -> None:
        self.namespaces.append(namespace)  # first: close() deletes it even if `add` half-failed
        run(["ip", "netns", "add", namespace])
        self.ns(namespace, ["ip", "link", "set", "lo", "up"])

    def link_worker(self) -> None:
        """The veth pair from the head's bridge to the worker namespace, and the worker's address. It is made inside
        the head namespace and one end moved: no interface ever exists in the root namespace. Deleting the worker
        namespace deletes the pair (both ends), so a restarted worker host gets a new one."""
        self.ns(self.head_ns, ["ip", "link", "add", "vh", "type", "veth", "peer", "name", "vw"])
        self.ns(self.head_ns, ["ip", "link", "set", "vw", "netns", self.worker_ns])
        self.ns(self.head_ns, ["ip", "link", "set", "vh", "master", "br0"])
        self.ns(self.worker_ns, ["ip", "addr", "add", f"{WORKER_ADDRESS}/24", "dev", "vw"])
        self.ns(self.head_ns, ["ip", "link", "set", "vh", "up"])
        self.ns(self.worker_ns, ["ip", "link", "set", "vw", "up"])

    def ns(self, namespace: str, command: list[str], timeout_s: float = 60, check: bool = True,
           **kwargs) -> subprocess.CompletedProcess:
        return run(["ip", "netns", "exec", namespace, *command], timeout_s=timeout_s, check=check,
                   env=kwargs.pop("env", environment(self.token_path)), **kwargs)

    def spawn(self, namespace: str, command: list[str], log_name: str, env: dict[str, str] | None = None):
        with open(self.log_dir / log_name, "ab") as log:
            process = subprocess.Popen(["ip", "netns", "exec", namespace, *command], stdout=log,
                                       stderr=subprocess.STDOUT, env=env or environment(self.token_path),
                                       cwd=str(self.temp_root),
                                       start_new_session=True)
        self.processes.append(process)
        return process

    # ----- services -----
    def start_s3(self) -> None:
        self.proxy_mode_file.write_text("pass\n")
        self.spawn(self.head_ns, [PYTHON, "-m", "moto.server", "-H", HEAD_ADDRESS, "-p", str(MOTO_PORT)], "moto.log")
        self.spawn(self.head_ns, [PYTHON, str(Path(__file__).with_name("fault_proxy.py")), HEAD_ADDRESS,
                                  str(PROXY_PORT), f"{HEAD_ADDRESS}:{MOTO_PORT}", str(self.proxy_mode_file)],
                   "proxy.log")
        self.s3_script("import time\nfor _ in range(100):\n    try:\n        fs.ls('/'); break\n"
                       "    except Exception:\n        time.sleep(0.2)\nfs.mkdir(BUCKET)\n", timeout_s=60)

    def upload_inputs(self, rows: int, manifests: int = 4) -> dict[str, str]:
        """The bundled samples and model into the bucket, with `rows` utterances over `manifests` manifests (several
        blocks, so parts commit while a job runs, not all at its end); their URIs."""
        lines = manifest_lines(rows)
        folder = self.temp_root / "manifests"
        folder.mkdir(exist_ok=True)
        for index in range(manifests):
            (folder / f"m{index}.json").write_text("\n".join(lines[index::manifests]) + "\n")
        body = (f"for path in sorted(__import__('glob').glob({str(REPOSITORY / 'samples' / '*.flac')!r})):\n"
                "    fs.put_file(path, f'{BUCKET}/data/' + path.rsplit('/', 1)[-1])\n"
                f"for path in sorted(__import__('glob').glob({str(folder / '*.json')!r})):\n"
                "    fs.put_file(path, f'{BUCKET}/data/' + path.rsplit('/', 1)[-1])\n"
                f"fs.put_file({str(REPOSITORY / 'models' / 'demo_hybrid_rnnt_ctc.nemo')!r}, "
                "f'{BUCKET}/models/demo_hybrid_rnnt_ctc.nemo')\n")
        self.s3_script(body)
        return {"manifest": f"s3://{BUCKET}/data/m*.json", "model": f"s3://{BUCKET}/models/demo_hybrid_rnnt_ctc.nemo"}

    def set_proxy_mode(self, mode: str) -> None:
        """pass | flaky:<fraction> | deny-writes:<prefix> | hold-gets:<n>:<glob> (see fault_proxy.py)."""
        self.proxy_mode_file.write_text(mode + "\n")

    def start_head(self) -> None:
        self.spawn(self.head_ns, [str(VENV_BIN / "ray"), "start", "--head", f"--node-ip-address={HEAD_ADDRESS}",
                                  f"--port={GCS_PORT}", "--num-cpus=1", f"--dashboard-host={HEAD_ADDRESS}",
                                  f"--dashboard-port={DASHBOARD_PORT}", "--include-dashboard=true",
                                  "--object-store-memory=300000000", f"--temp-dir={self.temp_root}/rh", "--block"],
                   "head.log")
        self.wait_for_nodes(1, timeout_s=90)

    def start_worker(self) -> None:
        if self.worker_ns not in self.namespaces:
            raise RuntimeError("the worker namespace is gone")
        self.spawn(self.worker_ns, self.worker_command(), "worker.log")
        self.wait_for_nodes(2, timeout_s=120)

    def worker_command(self) -> list[str]:
        return [str(VENV_BIN / "ray"), "start", f"--address={HEAD_ADDRESS}:{GCS_PORT}",
                f"--node-ip-address={WORKER_ADDRESS}", "--num-cpus=1", "--object-store-memory=300000000", "--block"]

    def alive_nodes(self) -> list[dict]:
        script = ("import json, urllib.request\n"
                  f"token = open({str(self.token_path)!r}).read().strip()\n"
                  f"request = urllib.request.Request('http://{HEAD_ADDRESS}:{DASHBOARD_PORT}/nodes?view=summary',"
                  " headers={'Authorization': 'Bearer ' + token})\n"
                  "data = json.load(urllib.request.urlopen(request, timeout=5))\n"
                  "print(json.dumps([{'ip': n['raylet']['nodeManagerAddress'], 'state': n['raylet']['state'],\n"
                  "                   'id': n['raylet']['nodeId']}\n"
                  "                  for n in data['data']['summary']]))\n")
        result = self.ns(self.head_ns, [PYTHON, "-c", script], check=False, timeout_s=20)
        if result.returncode != 0:
            return []
        return [n for n in json.loads(result.stdout) if n["state"] == "ALIVE"]

    def wait_for_nodes(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.alive_nodes()) == count:
                return
            time.sleep(1)
        raise RuntimeError(f"{count} Ray node(s) not alive after {timeout_s} s; logs in {self.log_dir}")

    # ----- S3 from the test side (inside the head namespace) -----
    def s3_script(self, body: str, timeout_s: float = 120) -> str:
        """Run `body` in the head namespace with `fs` (s3fs, straight to moto) and `BUCKET` defined; its stdout."""
        prelude = ("import s3fs, json\n"
                   f"BUCKET = {BUCKET!r}\n"
                   f"fs = s3fs.S3FileSystem(client_kwargs={{'endpoint_url': {self.direct_endpoint!r}}})\n")
        return self.ns(self.head_ns, [PYTHON, "-c", prelude + body], timeout_s=timeout_s, cwd=str(REPOSITORY)).stdout

    def read_output_ids(self, output: str) -> dict:
        """Rows, utterance ids (list, with repeats) and whether _SUCCESS exists, of an s3:// output."""
        body = (f"import os\nos.environ['AWS_ENDPOINT_URL'] = {self.direct_endpoint!r}\n"
                "from pipeline import schema\nfrom pipeline.io import sink\n"
                f"table = sink.read_output({output!r}, columns=[schema.UTTERANCE_ID, schema.STATUS])\n"
                "print(json.dumps({'ids': table.column(0).to_pylist(), 'statuses': table.column(1).to_pylist(),\n"
                f"                  'complete': sink.is_complete({output!r}),\n"
                f"                  'parts': len(sink.list_parts({output!r}))}}))\n")
        return json.loads(self.s3_script(body).strip().splitlines()[-1])

    # ----- jobs -----
    def submit_command(self, args: list[str], env_vars: dict[str, str] | None = None,
                       submission_id: str | None = None, no_wait: bool = False) -> list[str]:
        # the bundled models are read from the bucket, not uploaded with the checkout
        runtime_env = {"env_vars": {**S3_ENVIRONMENT, "AWS_ENDPOINT_URL": self.endpoint,
                                    "PYTHONUNBUFFERED": "1", **(env_vars or {})},
                       "excludes": ["models/", ".hypothesis/", ".pytest_cache/", ".ruff_cache/"]}
        command = [str(VENV_BIN / "ray"), "job", "submit", "--address", f"http://{HEAD_ADDRESS}:{DASHBOARD_PORT}",
                   "--working-dir", str(REPOSITORY), "--runtime-env-json", json.dumps(runtime_env)]
        if submission_id:
            command += ["--submission-id", submission_id]
        if no_wait:
            command.append("--no-wait")
        return [*command, "--", "python", "jobs/transcribe.py", *args]

    def submit(self, args: list[str], env_vars: dict[str, str] | None = None, timeout_s: float = 300,
               submission_id: str | None = None) -> subprocess.CompletedProcess:
        """`ray job submit` as a user runs it, waiting for the job and printing its logs; past `timeout_s`, returncode
        124 with what it printed and `describe()` in stderr."""
        command = self.submit_command(args, env_vars, submission_id)
        try:
            return self.ns(self.head_ns, command, timeout_s=timeout_s, check=False, cwd=str(REPOSITORY))
        except subprocess.TimeoutExpired as expired:
            printed = [text.decode(errors="replace") if isinstance(text, bytes) else (text or "")
                       for text in (expired.stdout, expired.stderr)]
            return subprocess.CompletedProcess(command, 124, printed[0],
                                               f"{printed[1]}\n(not finished after {timeout_s} s)\n{self.describe()}")

    def ray_job(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        return self.ns(self.head_ns, [str(VENV_BIN / "ray"), "job", *args, "--address",
                                      f"http://{HEAD_ADDRESS}:{DASHBOARD_PORT}"], timeout_s=timeout_s, check=False)

    def job_sdk(self, expression: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """Evaluate `expression` with `client` (a JobSubmissionClient for this cluster) in the head namespace;
        `ray job status` prints no status word for finished jobs ("Job 'x' failed"), so the SDK is asked."""
        script = ("from ray.job_submission import JobSubmissionClient\n"
                  f"client = JobSubmissionClient('http://{HEAD_ADDRESS}:{DASHBOARD_PORT}')\n"
                  f"print('\\n' + str({expression}))\n")
        return self.ns(self.head_ns, [PYTHON, "-c", script], timeout_s=timeout_s, check=False)

    def job_status(self, submission_id: str) -> str:
        """PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED; UNKNOWN when the dashboard did not answer."""
        result = self.job_sdk(f"client.get_job_status({submission_id!r}).value", timeout_s=30)
        lines = result.stdout.strip().splitlines()
        return lines[-1].strip() if result.returncode == 0 and lines else "UNKNOWN"

    def wait_job(self, submission_id: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        status = "UNKNOWN"
        while time.monotonic() < deadline:
            status = self.job_status(submission_id)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                return status
            time.sleep(2)
        return status

    def submit_detached(self, args: list[str], submission_id: str,
                        env_vars: dict[str, str] | None = None) -> None:
        result = self.ns(self.head_ns, self.submit_command(args, env_vars, submission_id, no_wait=True),
                         timeout_s=120, check=False, cwd=str(REPOSITORY))
        if result.returncode != 0:
            raise RuntimeError(f"submit failed: {result.stdout[-2000:]} {result.stderr[-2000:]}")

    def job_logs(self, submission_id: str) -> str:
        result = self.ray_job("logs", submission_id)
        return result.stdout + result.stderr

    def actors(self) -> list[dict]:
        """Every actor the cluster has had (alive or dead): class_name, node_id, state, job_id, ..."""
        result = self.ns(self.head_ns, [str(VENV_BIN / "ray"), "list", "actors", "--address",
                                        f"http://{HEAD_ADDRESS}:{DASHBOARD_PORT}", "--detail", "--format", "json",
                                        "--limit", "10000"], timeout_s=60)
        return json.loads(result.stdout)

    def describe(self) -> str:
        """What a failed wait needs to be understood: the nodes, the actors alive and where, and the resources
        still free (`ray status`)."""
        lines = [f"nodes: {self.alive_nodes()}"]
        try:
            for actor in self.actors():
                if actor.get("state") != "DEAD":
                    lines.append(f"actor {actor.get('class_name')} {actor.get('state')} job={actor.get('job_id')} "
                                 f"node={str(actor.get('node_id'))[:8]} resources={actor.get('required_resources')}")
        except Exception as error:  # a diagnosis must not hide the failure it describes
            lines.append(f"actors: {error}")
        status = self.ns(self.head_ns, [str(VENV_BIN / "ray"), "status", f"--address={HEAD_ADDRESS}:{GCS_PORT}"],
                         timeout_s=60, check=False)
        lines.append(status.stdout[-3000:] + status.stderr[-1000:])
        return "\n".join(lines)

    def node_ids(self, ip: str) -> set[str]:
        """Ids of the alive Ray nodes at `ip`."""
        return {node["id"] for node in self.alive_nodes() if node["ip"] == ip}

    def actor_nodes(self) -> dict[str, set[str]]:
        """Node ip -> class names of every actor the cluster has had (alive or dead)."""
        result = self.ns(self.head_ns, [str(VENV_BIN / "ray"), "list", "actors", "--address",
                                        f"http://{HEAD_ADDRESS}:{DASHBOARD_PORT}", "--detail", "--format", "json",
                                        "--limit", "10000"], timeout_s=60)
        ips = {node["node_id"]: node["node_ip"] for node in json.loads(self.ns(
            self.head_ns, [str(VENV_BIN / "ray"), "list", "nodes", "--address",
                           f"http://{HEAD_ADDRESS}:{DASHBOARD_PORT}", "--format", "json", "--limit", "100"],
            timeout_s=60).stdout)}
        nodes: dict[str, set[str]] = {}
        for actor in json.loads(result.stdout):
            nodes.setdefault(ips.get(actor.get("node_id"), "?"), set()).add(actor.get("class_name", "?"))
        return nodes

    def count_parts(self, output: str) -> int:
        key = output.removeprefix("s3://")
        return int(self.s3_script(f"fs.invalidate_cache()\nprint(len([p for p in fs.ls({key!r}) "
                                  "if p.rsplit('/', 1)[-1].startswith('part-')]) if fs.exists("
                                  f"{key!r}) else 0)\n", timeout_s=30).strip())

    def wait_for_parts(self, output: str, count: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            parts = self.count_parts(output)
            if parts >= count:
                return parts
            time.sleep(0.5)
        raise RuntimeError(f"fewer than {count} parts under {output} after {timeout_s} s")

    def driver_pids(self) -> list[int]:
        """Processes of the head namespace running jobs/transcribe.py (job drivers)."""
        pids = []
        for pid in self.namespace_pids(self.head_ns):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(part.endswith(b"jobs/transcribe.py") for part in command):
                pids.append(pid)
        return pids

    # ----- faults and teardown -----
    def namespace_pids(self, namespace: str) -> list[int]:
        result = run(["ip", "netns", "pids", namespace], check=False)
        return [int(pid) for pid in result.stdout.split() if pid.isdigit() and int(pid) != os.getpid()]

    def kill_namespace(self, namespace: str, rounds: int = 20) -> None:
        """SIGKILL every process of `namespace` (all started by this cluster), until none is left."""
        for _ in range(rounds):
            pids = self.namespace_pids(namespace)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.3)
        raise RuntimeError(f"processes left in {namespace}: {self.namespace_pids(namespace)}")

    def kill_worker_host(self) -> None:
        """The worker host dies: every process in its namespace SIGKILLed, then the namespace (and its end of the
        link) removed, so the head sees it go as it would a machine that lost power."""
        self.kill_namespace(self.worker_ns)
        run(["ip", "netns", "delete", self.worker_ns], check=False)
        self.namespaces.remove(self.worker_ns)

    def ensure_two_hosts(self) -> None:
        """Bring the worker host back if a test killed it (the next test starts from two hosts again)."""
        if self.worker_ns not in self.namespaces:
            self.restart_worker_host()
        self.wait_for_nodes(2, timeout_s=120)

    def restart_worker_host(self, timeout_s: float = 120) -> str:
        """The worker host comes back: a new namespace with the same address, the link, and `ray start` joining
        the head again, as a new Ray node; its node id, once the head counts it alive."""
        known = {node["id"] for node in self.alive_nodes()}  # the dead worker may still count as alive for a while
        self.add_namespace(self.worker_ns)
        self.link_worker()
        self.spawn(self.worker_ns, self.worker_command(), "worker.log")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            joined = self.node_ids(WORKER_ADDRESS) - known
            if joined:
                return joined.pop()
            time.sleep(1)
        raise RuntimeError(f"the restarted worker did not join after {timeout_s} s; logs in {self.log_dir}")

    # ----- what the fault proxy saw (its log, read without entering a namespace) -----
    def proxy_log(self) -> list[str]:
        return (self.log_dir / "proxy.log").read_text().splitlines()

    def parts_written(self, output: str) -> set[str]:
        """Part keys under `output` that the proxy saw written successfully (PUT answered 2xx)."""
        prefix = "/" + output.removeprefix("s3://").rstrip("/") + "/" + "part-"
        return {line.split()[-1] for line in self.proxy_log()
                if line.startswith("wrote ") and line.split()[-1].startswith(prefix)}

    def wait_until(self, what: str, predicate, timeout_s: float, every_s: float = 0.5) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"not {what} after {timeout_s} s; logs in {self.log_dir}")
            time.sleep(every_s)

    def mount_small_disk(self) -> None:
        """A 12 KiB tmpfs at `small_disk` for the full-disk test, mounted before any host starts: `ip netns exec`
        gives each process it starts a copy of the mount table as it is then (and mounts made later in the root
        namespace do not reach the copies where `/` is not a shared mount, as in a container), so a tmpfs mounted
        mid-test would be seen by the test but not by the job, which would write into the directory under it.
        `remount,size=` changes the one filesystem every copy mounts. `small_disk_problem` says why there is none."""
        self.small_disk.mkdir(parents=True, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k,mode=0777", "lsc-tmpfs",
                                  str(self.small_disk)], capture_output=True, text=True, timeout=30)
        self.small_disk_problem = None if mounted.returncode == 0 else f"cannot mount a tmpfs: {mounted.stderr.strip()}"

    def resize_small_disk(self, size: str) -> None:
        run(["mount", "-o", f"remount,size={size}", str(self.small_disk)])

    def unmount_all(self) -> None:
        """Unmount whatever a test mounted under this cluster's temp dir (the full-disk tmpfs), also after a
        failure; lazily, so a process still holding a file cannot keep it mounted."""
        root = str(self.temp_root) + "/"
        with open("/proc/self/mounts") as handle:
            points = [line.split()[1] for line in handle if line.split()[1].startswith(root)]
        for point in sorted(points, reverse=True):
            run(["umount", "-l", point], check=False)

    def close(self, keep_logs: bool = False) -> None:
        errors = []
        for namespace in reversed(self.namespaces):
            try:
                self.kill_namespace(namespace)
            except Exception as error:  # keep going: the namespaces must go whatever happened
                errors.append(str(error))
            run(["ip", "netns", "delete", namespace], check=False)
        self.namespaces.clear()
        for process in self.processes:  # `ip netns exec` execs the command: each was killed above; reap it
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self.processes.clear()
        self.unmount_all()
        if keep_logs:
            shutil.rmtree(self.temp_root / "rh", ignore_errors=True)
        else:
            shutil.rmtree(self.temp_root, ignore_errors=True)
        if errors:
            print("cluster teardown:", *errors, file=sys.stderr)


def manifest_lines(rows: int) -> list[str]:
    """`rows` distinct utterances over the bundled samples: each sample at several offsets, 0.8 s each."""
    samples = [json.loads(line) for line in (REPOSITORY / "samples" / "manifest.json").read_text().splitlines()
               if line.strip()]
    lines = []
    for index in range(rows):
        sample = samples[index % len(samples)]
        offset = round(0.05 * (index // len(samples)), 3)
        if offset + 0.8 > sample["duration"]:
            raise ValueError(f"{rows} rows need offsets past the end of {sample['audio_filepath']}")
        lines.append(json.dumps({"audio_filepath": sample["audio_filepath"], "offset": offset, "duration": 0.8}))
    return lines
