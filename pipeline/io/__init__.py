"""Bytes in and out: where a name points (`uris`), fetching and the node's cache (`fetch`, `cache`), manifests
(`manifest`, `manifest_file`), audio (`audio`, `audio_read`), the Parquet output exactly once (`sink`), folders of small
files (`folder`), and credentials kept out of everything written or printed (`redact`).

The names below are this package's public face, imported lazily (`decoders/exports.py`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "audio": ("AudioBytes", "AudioError", "LoadedAudio", "load_audio", "load_audio_batch"),
    "cache": (
        "DEFAULT_CACHE_DIR", "DEFAULT_MODELS_DIR", "file_lock", "lms_dir", "models_dir", "phrases_dir",
        "word_lms_dir",
    ),
    "fetch": ("cached_sha256", "fetch_file", "file_sha256"),
    "folder": ("Folder",),
    "manifest": ("read_manifest", "sniff_manifest"),
    "sink": ("IdSet",),
    "uris": ("expand_manifest_uris", "local_path"),
})
