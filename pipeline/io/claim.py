"""An output's claim: which kind of results it holds (the model's content, the decoding, every setting that changes
results), made once, atomically, before any work (step 0 of the commit protocol in `pipeline/io/sink.py`).

`claim_output` creates `_identity.json` if it is absent, in one atomic step (`create_exclusively`: link(2) on a
local disk, a conditional PUT, `If-None-Match: *`, on S3), so of two jobs started together into a new output
exactly one makes the claim; a job whose identity differs from the claim is refused (`IdentityMismatch`) in one
line naming the setting that differs and both values, before it writes anything. Jobs of one identity share the
output.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
import uuid
from typing import Any

from pipeline import schema
from pipeline.io import sink

CLAIM_FILE = "_identity.json"
SHOWN_DIFFERENCES = 2  # settings a refusal names (the first of them, `FIRST_NAMED`, where they differ)
FIRST_NAMED = ("model.content_sha256", "model.uri", "decoding.strategy")
CREATE_TRIES = 3  # a conditional PUT racing another is answered 409 (S3): the next try is answered "exists"


class IdentityMismatch(ValueError):
    """The output holds results made another way (another model or decoding)."""


def create_exclusively(output_uri: str, name: str, data: bytes) -> None:
    """Create the file `name` in the output holding `data`, whole, only if no file of that name exists there;
    `FileExistsError` if one does. Of several callers at once, exactly one creates it:

    - a local disk: the bytes go to a temporary file, hard-linked to `name` (link(2) fails if `name` exists, as
      `O_EXCL` does, and `name` never holds less than all the bytes); `O_EXCL` where hard links are not supported.
    - S3: one PUT with `If-None-Match: *` (s3fs's `pipe_file(mode="create")`), which S3 refuses if the object
      exists (AWS since 2024, MinIO, and moto in the tests); a PUT racing another is answered 409 and tried again.
    - other fsspec backends: their `pipe_file(mode="create")`; fsspec's own (used by a backend that does not
      implement it) checks and then writes, which is not atomic.
    """
    filesystem, root = sink.output_filesystem(output_uri)
    root = root.rstrip("/")
    final = f"{root}/{name}"
    if sink.is_local_filesystem(filesystem):
        os.makedirs(root, exist_ok=True)
        temporary = f"{root}/.tmp-{uuid.uuid4().hex}"
        try:
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(temporary, final)
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links (some FUSE mounts)
                descriptor = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(data)
        finally:
            os.remove(temporary)
        return
    filesystem.makedirs(root, exist_ok=True)
    for attempt in range(CREATE_TRIES):
        try:
            filesystem.pipe_file(final, data, mode="create")
            return
        except FileExistsError:
            raise
        except OSError:
            if attempt == CREATE_TRIES - 1:
                raise
            time.sleep(0.25 * 2**attempt)


def read_identity(output_uri: str) -> dict[str, Any] | None:
    """What the output's claim records (`CLAIM_FILE`: "identity", "row_identity", "claimed"), or, in an output an
    earlier loopscribe made (no claim), its `_config.json`; None where neither exists."""
    filesystem, root = sink.output_filesystem(output_uri)
    for name in (CLAIM_FILE, sink.CONFIG_FILE):
        path = f"{root.rstrip('/')}/{name}"
        filesystem.invalidate_cache(path)
        try:
            with filesystem.open(path, "r") as handle:
                return json.load(handle)
        except FileNotFoundError:
            continue
    return None


# settings added by a later version whose default is not what earlier versions did: an identity written before the
# setting existed is read with the value that describes its rows (section -> key -> the earlier behaviour)
EARLIER_BEHAVIOUR = {"long_audio": {"segment": "pauses"}}  # before voice-activity segmentation, long rows were cut
# at energy pauses; resuming such an output with the new default (vad) would mix two kinds of rows


def identity_differences(earlier: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(setting, its value in `earlier`, its value `now`) for each setting that differs, as `section.key` in name
    order. A setting that only one of the two knows (added by a later version) does not make them differ, unless
    its default changed what the rows are (`EARLIER_BEHAVIOUR`: it is then compared as the earlier behaviour)."""
    now = json.loads(json.dumps(now))  # as it will be stored: tuples become lists
    found = []
    for section in sorted(set(earlier) & set(now)):
        before, after = {**EARLIER_BEHAVIOUR.get(section, {}), **(earlier[section] or {})}, now[section] or {}
        found += [(f"{section}.{key}", before[key], after[key])
                  for key in sorted(set(before) & set(after)) if before[key] != after[key]]
    return found


def shown_value(value: Any, width: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= width else f"{text[:width - 3]}..."


def check_identity(output_uri: str, identity: dict[str, Any]) -> None:
    """Refuse (`IdentityMismatch`, one line naming the first setting that differs and both values) to add rows to
    an output whose claim (or `_config.json`, in an output of an earlier loopscribe) records another results
    identity, or whose rows were identified another way (`schema.ROW_IDENTITY`: an output of a loopscribe that
    identified rows by manifest line cannot be resumed by content). Reads only: `claim_output` claims."""
    written = read_identity(output_uri)
    if written is None:
        return
    if written.get("row_identity") != schema.ROW_IDENTITY and sink.list_parts(output_uri):
        raise IdentityMismatch(
            f"{output_uri} was written by an older loopscribe, which identified rows by manifest line: its rows "
            f"cannot be matched to utterances by content ({schema.ROW_IDENTITY}), so resuming it could transcribe "
            "rows twice or skip them; write to a new output, or delete this one to start over")
    earlier = written.get("identity")
    differences = identity_differences(earlier, identity) if earlier is not None else []
    if not differences:
        return
    differences.sort(key=lambda difference: FIRST_NAMED.index(difference[0]) if difference[0] in FIRST_NAMED
                     else len(FIRST_NAMED))
    changes = []
    for setting, before, after in differences[:SHOWN_DIFFERENCES]:
        if setting == "model.content_sha256":
            changes.append(f"its model's content is sha256:{before[:16]} there, sha256:{after[:16]} here (a model "
                           "file replaced at the same path is another model)")
        else:
            changes.append(f"{setting} is {shown_value(before)} there, {shown_value(after)} here")
    change = ", ".join(changes)
    hidden = len(differences) - SHOWN_DIFFERENCES
    more = f" (and {hidden} more settings)" if hidden > 0 else ""
    claimed = written.get("claimed") or {}
    by = f", claimed by {claimed.get('host')} pid {claimed.get('pid')} at {claimed.get('at')}" if claimed else ""
    raise IdentityMismatch(f"{output_uri} holds results of another model or decoding: {change}{more} "
                           f"({CLAIM_FILE if claimed else sink.CONFIG_FILE}{by}); write to a new output, or delete "
                           "this one to start over")


def claim_output(output_uri: str, identity: dict[str, Any]) -> bool:
    """Claim the output for results of `identity` before any work (the protocol's step 0): True if this call
    made the claim, False if the output was claimed for the same identity already (jobs of one identity share an
    output); `IdentityMismatch` if it holds, or another job claimed it just now for, another identity."""
    check_identity(output_uri, identity)  # refused at once where the claim (or an earlier version's config) differs
    claimed = {"host": socket.gethostname(), "pid": os.getpid(),
               "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "nonce": uuid.uuid4().hex}
    payload = {"identity": identity, "row_identity": schema.ROW_IDENTITY, "claimed": claimed}
    try:
        create_exclusively(output_uri, CLAIM_FILE, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())
    except FileExistsError:  # claimed meanwhile (a job started at the same time) or before: that claim decides
        check_identity(output_uri, identity)
        return False
    written = read_identity(output_uri) or {}
    if (written.get("claimed") or {}).get("nonce") != claimed["nonce"]:
        # a store that ignored the condition and let a later PUT replace this one: that claim decides
        check_identity(output_uri, identity)
        return False
    return True
