"""A GCS JSON API emulator (gcp-storage-emulator) served over HTTP on 127.0.0.1, for the clients a
pod runs: gcsfs (through etils.epath and fsspec) and TensorStore's `gcs` driver (orbax's arrays).

`Emulator()` starts `python tests/gcs_emulator.py PORT` on a free port (in-memory, one bucket,
`bucket`), waits until it answers, and `stop()` (or leaving its `with` block) ends it; `env()`
is the environment that points both clients at it: `STORAGE_EMULATOR_HOST` (gcsfs,
google-cloud-storage), `TENSORSTORE_GCS_HTTP_URL` and `GOOGLE_AUTH_TOKEN_FOR_TESTING`
(TensorStore's anonymous token for a test endpoint). Nothing else: what a pod needs beyond
credentials (gcsfs's bucket-type probe off, request timeouts) tlm sets itself
(`tlm.remote_clients`), and the tests check that it does.

Two additions of ours, test-only, in the emulator's process:

- The generation adapter. The emulator's media download (`alt=media`) carries no
  `x-goog-generation` header, so TensorStore reads every object as generation 0 and the
  conditional write OCDBT (orbax's checkpoint format) makes with that generation is refused
  ("Malformed StorageGeneration"). The adapter adds the header from the object's own metadata,
  as GCS sends it. It is the emulator's gap, not tlm's: real GCS needs nothing.
- Faults: `fail(method, pattern, status, times)` makes the next `times` requests whose method
  and path (with its query) match answer `status` (403, 404, 503, ...) instead of being
  served, or never be answered (status 0: a black hole); `hits()` says how many requests
  matched each rule, `clear()` drops them. For a revoked token, a full bucket, an outage of
  some objects, a request that never returns.
- Files replaced whole on disk (the emulator rewrote its object index in place, and one killed
  mid-write could not start again from what it left).
- A listen backlog the clients' concurrency fits in (http.server's is 5: connections beyond it
  were dropped and retried by TCP after seconds).

What the emulator does not model, and the in-process doubles (tests/objstore.py,
tests/remote_store.py) therefore still test: it ignores `ifGenerationMatch` (a conditional
create overwrites an existing object, so the workdir lock's exclusive create is not
exercised against it), and it serves one request at a time (no latency or concurrency to
measure).
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BUCKET = "bucket"


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Emulator:
  """The emulator in a child process on a free port of 127.0.0.1 (see the module docstring).

  Args:
    data_dir: keep the objects in this directory (so that they outlive `stop` and come back
      with `start`); None: in memory.
  """

  def __init__(self, data_dir: str | None = None):
    self.port = _free_port()
    self.url = f"http://127.0.0.1:{self.port}"
    self.data_dir = data_dir
    self.start()

  def start(self, timeout_s: float = 30.0, retries: int = 3) -> None:
    """Starts the emulator (again, on the same port and data after `stop`)."""
    # Its reports go to a file: a pipe nobody reads would fill and stop it.
    self._log = tempfile.TemporaryFile("w+")
    self._proc = subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), str(self.port), self.data_dir or ""],
      stdout=subprocess.DEVNULL,
      stderr=self._log,
      text=True,
    )
    deadline = time.monotonic() + timeout_s
    while True:
      try:
        with urllib.request.urlopen(self.url + "/", timeout=1) as r:
          if r.status == 200:
            return
      except OSError:
        pass
      if self._proc.poll() is not None or time.monotonic() > deadline:
        self._log.seek(0)
        why = self._log.read()[-2000:]
        self.stop()
        if "Address already in use" in why and retries:  # the port was taken meanwhile
          time.sleep(0.5)
          return self.start(timeout_s, retries - 1)
        raise RuntimeError(f"the GCS emulator did not start: {why}")
      time.sleep(0.1)

  def env(self) -> dict:
    """The variables that point gcsfs and TensorStore at this emulator."""
    return {
      "STORAGE_EMULATOR_HOST": self.url,
      "TENSORSTORE_GCS_HTTP_URL": self.url,
      "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
    }

  def running(self) -> bool:
    return self._proc.poll() is None

  def stop(self) -> None:
    """Ends the emulator (the storage goes away: connections are refused from now on)."""
    if self._proc.poll() is None:
      self._proc.kill()
      self._proc.wait(10)
    self._log.close()

  def _control(self, body: dict | None = None) -> list:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(self.url + "/_tlm/faults", data=data, method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
      return json.loads(r.read())

  def fail(self, method: str, pattern: str, status: int, times: int = 1 << 30) -> None:
    """The next `times` requests of `method` ("*": any) whose path and query match the regular
    expression `pattern` (searched) answer `status` with a GCS-style JSON error; status 0:
    they are black-holed (the connection accepted, the request read, no answer ever, the
    connection held open) while the emulator goes on serving the others."""
    self._control({"method": method, "pattern": pattern, "status": status, "times": times})

  def clear(self) -> None:
    """No more faults (the rules given so far are dropped)."""
    self._control({"clear": True})

  def hits(self) -> list[int]:
    """Requests that matched each rule of `fail`, in the order the rules were given."""
    return self._control()

  def __enter__(self) -> "Emulator":
    return self

  def __exit__(self, *exc) -> None:
    self.stop()


def _serve(port: int, data_dir: str) -> None:
  """The emulator with the generation adapter and the fault rules (this file run as a script)."""
  import socketserver
  from http import server as http_server

  from gcp_storage_emulator import server

  # The emulator serves one request at a time; the clients send dozens at once (gcsfs gathers a
  # directory's uploads, TensorStore a checkpoint's). With http.server's backlog of 5 the
  # kernel drops the rest of the connections, which the clients' TCP then retries after 1, 3,
  # 7 s...: minutes of waiting. They wait in the backlog instead.
  http_server.HTTPServer.request_queue_size = 1024
  from gcp_storage_emulator import storage
  from gcp_storage_emulator.handlers import objects

  # On disk the emulator rewrites its index of every object (`.meta`) in place after each
  # change: killed mid-write (the "store gone" test kills it), it left a torn index that it
  # could not start from again. GCS never shows a torn object: each file is replaced whole.
  def write_bytes(self, rel: str, content: bytes) -> None:
    if self._use_memory:
      return plain_write(self, rel, content)
    plain_write(self, rel + ".tlm-partial", content)
    os.replace(self._disk_path(rel + ".tlm-partial"), self._disk_path(rel))

  plain_write = storage._FileStore.write_bytes
  storage._FileStore.write_bytes = write_bytes

  media = objects.download

  def download(request, response, storage, *args, **kwargs):
    media(request, response, storage, *args, **kwargs)
    try:
      obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    except Exception:  # not found: the 404 is already set
      return
    response["x-goog-generation"] = str(obj["generation"])
    response["x-goog-metageneration"] = str(obj["metageneration"])

  # `objects.get` calls the module's `download` for `alt=media`; the routes hold it too.
  objects.download = download
  server.HANDLERS = tuple(
    (route, {m: download if fn is media else fn for m, fn in methods.items()})
    for route, methods in server.HANDLERS
  )

  rules: list[dict] = []
  handle = server.Router.handle
  held = set()  # black-holed connections: never answered, never closed
  close = socketserver.TCPServer.shutdown_request

  def shutdown_request(self, request):
    if request not in held:
      close(self, request)

  socketserver.TCPServer.shutdown_request = shutdown_request

  def routed(self, method):
    handler = self._request_handler
    if handler.path == "/_tlm/faults":
      length = int(handler.headers.get("Content-Length") or 0)
      body = json.loads(handler.rfile.read(length)) if length else None
      if body and body.get("clear"):
        rules.clear()
      elif body:
        rules.append({**body, "hits": 0})
      _answer(handler, 200, [rule["hits"] for rule in rules])
      return
    for rule in rules:
      if rule["times"] > 0 and rule["method"] in ("*", method):
        if re.search(rule["pattern"], handler.path):
          rule["times"] -= 1
          rule["hits"] += 1
          if rule["status"] == 0:
            held.add(handler.connection)
            handler.close_connection = True
            return
          error = {
            "error": {"code": rule["status"], "message": "injected by tests/gcs_emulator.py"}
          }
          _answer(handler, rule["status"], error)
          return
    handle(self, method)

  server.Router.handle = routed
  server.create_server(
    "127.0.0.1", port, in_memory=not data_dir, data_dir=data_dir or None, default_bucket=BUCKET
  ).run()


def _answer(handler, status: int, body) -> None:
  # The body of a POST nobody read would be taken for the next request on the connection.
  length = int(handler.headers.get("Content-Length") or 0)
  if length and handler.path != "/_tlm/faults":
    handler.rfile.read(length)
  data = json.dumps(body).encode()
  handler.send_response(status)
  handler.send_header("Content-Type", "application/json")
  handler.send_header("Content-Length", str(len(data)))
  handler.end_headers()
  handler.wfile.write(data)


if __name__ == "__main__":
  import logging

  logging.disable(logging.CRITICAL)  # the emulator logs every request and every 404
  _serve(int(sys.argv[1]), sys.argv[2])
