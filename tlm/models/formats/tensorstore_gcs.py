"""TensorStore's requests to GCS (orbax's arrays on gs://) under tlm's bounds.

Orbax writes and reads a checkpoint's arrays through TensorStore's own `gcs` driver, not gcsfs.
TensorStore retries a failed request (a 503, a reset or refused connection) up to 32 times,
backing off to 32 s: a run whose bucket went away waits some 15 minutes before its failed save
is reported. `install` has orbax's GCS key-value store spec carry a bounded retry policy
instead, `tlm.remote_clients.TENSORSTORE_RETRIES` retries from 1 s to at most
`TENSORSTORE_MAX_DELAY_S` (about half a minute of backoff in all); the timeouts of each request
are set in the environment by `tlm.remote_clients.configure` (curl's connect timeout and
low-speed limit). What a request is retried on is TensorStore's choice (transient statuses and
transport failures; never 403 or 404): it is the one retry layer of those requests.
"""

from orbax.checkpoint._src.path import gcs_utils

from tlm import remote_clients


def install() -> None:
  """Bounds the retries of orbax's TensorStore GCS requests (once per process)."""
  if getattr(gcs_utils.get_kvstore_for_gcs, "tlm_bounded", False):
    return
  unbounded = gcs_utils.get_kvstore_for_gcs

  def bounded(path):
    spec = dict(unbounded(path))
    if spec.get("driver") == "gcs":
      spec.setdefault(
        "gcs_request_retries",
        {
          "max_retries": remote_clients.TENSORSTORE_RETRIES,
          "initial_delay": "1s",
          "max_delay": f"{remote_clients.TENSORSTORE_MAX_DELAY_S}s",
        },
      )
    return spec

  bounded.tlm_bounded = True
  gcs_utils.get_kvstore_for_gcs = bounded
