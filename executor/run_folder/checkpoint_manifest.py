"""The manifest of a checkpoint: every file's size and hash, written last.

Why: a checkpoint is read back by `--resume` minutes or days after it was written, possibly after
a crash, a full disk or a copy between machines. Without a record of what was written, a truncated
`state.pt` or an edited `meta.json` shows up as a traceback deep inside torch or inside a Ray
worker after the cluster has started. The manifest lists the size and BLAKE2b hash of each file;
it is written after the files it describes (temporary file, fsync, rename), so a manifest that is
present and matches proves the checkpoint was written completely and not changed since.

Checkpoints written before manifests existed have none: they are accepted after the content checks
of `checkpoint.load` alone, and the resume record says so (docs/live-executor.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from dynaresize.config_io import ConfigError

MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
_READ_CHUNK_BYTES = 1 << 20


class CheckpointError(ConfigError):
    """No usable checkpoint where `--resume` looked for one (one error line, exit 2)."""


def file_digest(path: Path) -> str:
    """BLAKE2b (32 hex characters) of a file's bytes, read in chunks."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        while chunk := handle.read(_READ_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, names: list[str]) -> Path:
    """Describe `names` (files in `folder`, already written and synced) in the manifest."""
    entries = {
        name: {"bytes": (folder / name).stat().st_size, "blake2b": file_digest(folder / name)}
        for name in names
    }
    document = {"format": MANIFEST_FORMAT, "files": entries}
    path = folder / MANIFEST_FILE
    tmp = folder / (MANIFEST_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def has_manifest(folder: Path) -> bool:
    return (folder / MANIFEST_FILE).is_file()


def verify_manifest(folder: Path, required: tuple[str, ...]) -> None:
    """Raise CheckpointError naming the file when the manifest is unreadable, lacks one of the
    `required` files, or a file's size or hash differs from what the manifest records."""
    path = folder / MANIFEST_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        files = document["files"]
        if document.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
            raise ValueError(f"format {document.get('format')!r}, want {MANIFEST_FORMAT}")
        expected = {n: (int(e["bytes"]), str(e["blake2b"])) for n, e in files.items()}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise CheckpointError(
            f"--resume: {path}: not a readable checkpoint manifest ({err})"
        ) from None
    for name in required:
        if name not in expected:
            raise CheckpointError(f"--resume: {path}: does not list {name}")
    for name, (size, digest) in sorted(expected.items()):
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"--resume: {file}: missing (the manifest lists it)")
        found = file.stat().st_size
        if found != size:
            raise CheckpointError(
                f"--resume: {file}: {found} bytes, the manifest recorded {size} "
                "(truncated or changed after it was written)"
            )
        if file_digest(file) != digest:
            raise CheckpointError(
                f"--resume: {file}: content differs from the hash in the manifest "
                "(changed after it was written)"
            )
