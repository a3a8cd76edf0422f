"""TensorStore's requests to GCS (orbax's arrays on gs://) under tlm's bounds.

Orbax writes and reads a checkpoint's arrays through TensorStore's own `gcs` driver, not gcsfs.
TensorStore retries a failed request (a 503, a reset or refused connection) up to 32 times,
backing off to 32 s: a run whose bucket went away waits some 15 minutes before its failed save
is reported. `install` has orbax's GCS key-value store spec carry a bounded retry policy
instead: `RETRIES` retries, backing off from a 120th of the deadline to at most a 15th
(`tlm.remote_clients.deadline_s`: 1 s to 8 s at the default 120 s, at most 23 s of waiting in
all); each request's timeouts are set in the environment by `tlm.remote_clients.configure`
(curl's connect timeout and low-speed limit: an eighth of the deadline without progress), so
that a request never answered fails within the deadline too (6 attempts of 15 s and the
waits: 113 s at the default). What a request is retried on is TensorStore's
choice (transient statuses and transport failures; never 403 or 404): it is the one retry
layer of those requests.
"""

from orbax.checkpoint._src.path import gcs_utils

from tlm import remote_clients

RETRIES = 5


def install() -> None:
  """Bounds the retries of orbax's TensorStore GCS requests (once per process)."""
  if getattr(gcs_utils.get_kvstore_for_gcs, "tlm_bounded", False):
    return
  unbounded = gcs_utils.get_kvstore_for_gcs

  def bounded(path):
    spec = dict(unbounded(path))
    if spec.get("driver") == "gcs":
      deadline = remote_clients.deadline_s()
      spec.setdefault(
        "gcs_request_retries",
        {
          "max_retries": RETRIES,
          "initial_delay": f"{deadline / 120:.3f}s",
          "max_delay": f"{deadline / 15:.3f}s",
        },
      )
    return spec

  bounded.tlm_bounded = True
  gcs_utils.get_kvstore_for_gcs = bounded
