"""Where a name in a job's arguments or a manifest points: local paths and URIs told apart once.

- A name without "://", and a `file://` URI, is a local path: opened with the OS, never parsed by fsspec, so
  `x::y.wav` and `man[1].json` are file names, not an fsspec chain or a glob (`local_path`).
- A relative audio path is taken from its manifest's folder, and "." and ".." are resolved like a filesystem on
  every backend, never above an object store's bucket (`resolve_audio_path`): object stores do not resolve
  `..` themselves.
- Manifest names: a name is a glob only where no file has that name, unless told (`expand_manifest_uris`).
- Where audio may come from (`--allowed-roots`, for manifests written by others): `AudioRoots` says whether an
  audio path lies under one of a job's roots, local paths after resolving ".." and links, URIs after resolving ".."
  (and, for http(s), percent-escapes, which a server would decode).
"""

from __future__ import annotations

import glob as globbing
import os
import posixpath
import re
from collections.abc import Iterable
from urllib.parse import unquote

import fsspec

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")

def local_path(uri: str) -> str | None:
    """The local path a manifest or audio name stands for, or None for a remote URI (or an fsspec chain)."""
    if uri[:7].lower() == "file://":
        return uri[len("file://"):]
    return None if "://" in uri else uri


def _resolve_dots(path: str) -> str:
    """`/a/./b/../c` -> `/a/c`, never above `/`; empty segments (`a//b`, a distinct object-store key) are kept."""
    segments: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if segments:
                segments.pop()
        elif segment != ".":
            segments.append(segment)
    return "/" + "/".join(segments)


def _split_uri(uri: str) -> tuple[str, str, str, str]:
    """`scheme://netloc/path?query` -> (`scheme://netloc`, `/path` or "", the query, "/" or ""). For http(s) a
    `#fragment` is cut off too; on other backends `#` is part of the key."""
    scheme, rest = uri.split("://", 1)
    netloc, slash, path = rest.partition("/")
    ends = [at for at in (path.find(c) for c in ("?#" if scheme.lower() in ("http", "https") else "?")) if at >= 0]
    cut = min(ends, default=len(path))
    return f"{scheme}://{netloc}", slash + path[:cut], path[cut:], slash


def _normalized_uri(uri: str) -> str:
    root, path, tail, slash = _split_uri(uri)
    return root + (_resolve_dots(path) if slash else "") + tail


def resolve_audio_path(audio_path: str, manifest_uri: str) -> str:
    """Where an audio path written in a manifest points: a relative path is taken from the manifest's folder,
    and "." and ".." are resolved like a filesystem on every backend (`s3://b/manifests/../audio/x.flac` ->
    `s3://b/audio/x.flac`; never above the bucket). A URL's query (and an http(s) fragment) is left as it is;
    `file://` URIs become local paths, and a local relative manifest gives a relative path (`samples/m.json`
    and `a.wav` -> `samples/a.wav`). An fsspec chain (`simplecache::s3://...`) is left to fsspec."""
    local_audio = local_path(audio_path)
    if local_audio is None:
        return _normalized_uri(audio_path) if _SCHEME.match(audio_path) else audio_path
    if local_audio.startswith("/"):
        return posixpath.normpath(local_audio)
    local_manifest = local_path(manifest_uri)
    if local_manifest is not None:
        return posixpath.normpath(posixpath.join(posixpath.dirname(local_manifest), local_audio))
    if not _SCHEME.match(manifest_uri):  # an fsspec chain: its folder, as written
        return posixpath.join(posixpath.dirname(manifest_uri), local_audio)
    root, path, _, _ = _split_uri(manifest_uri)
    return _normalized_uri(root + path[: path.rfind("/") + 1] + local_audio) if path else (
        _normalized_uri(f"{root}/{local_audio}"))


def expand_manifest_uris(patterns: Iterable[str], glob: bool | None = None) -> list[str]:
    """Paths, URIs or globs -> the manifest URIs they name, in order, each once; local ones (`file://` too) as
    absolute local paths, remote literal ones as written.

    `glob=None`: a pattern naming an existing file is that file whatever it holds (`[ ] * ? :: #`, spaces,
    non-ASCII); only where no such file exists and the name has glob characters is it a glob. True: always a
    glob; False: never. Local names never go through fsspec, so `x::y.json` is a file, not a chain. A pattern
    that names no file raises FileNotFoundError naming it (a typo should not silently transcribe nothing)."""
    uris: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        local = local_path(pattern)
        matches = _expand_local(local, glob) if local is not None else _expand_remote(pattern, glob)
        if not matches:
            raise FileNotFoundError(f"no manifest matches {pattern!r}")
        for uri in matches:
            if uri not in seen:
                seen.add(uri)
                uris.append(uri)
    return uris


def _expand_local(pattern: str, glob: bool | None) -> list[str]:
    path = os.path.expanduser(pattern)
    is_file = os.path.isfile(path)
    if glob is False or (glob is None and (is_file or not globbing.has_magic(path))):
        return [os.path.abspath(path)] if is_file else []
    return sorted(os.path.abspath(m) for m in globbing.glob(path, recursive=True) if os.path.isfile(m))


def _expand_remote(pattern: str, glob: bool | None) -> list[str]:
    filesystem, path = fsspec.core.url_to_fs(pattern)
    filesystem.invalidate_cache()  # s3fs and gcsfs keep listings per instance: objects added since must be seen
    if glob is False or (glob is None and not fsspec.core.has_magic(path)):
        return [pattern] if filesystem.isfile(path) else []
    if glob is None and filesystem.isfile(path):
        return [pattern]
    found = filesystem.glob(path, detail=True)
    return [filesystem.unstrip_protocol(match) for match in sorted(found) if found[match].get("type") == "file"]


class AudioRoots:
    """Where a job's audio may come from: local folders and URI prefixes (`input.allowed_roots`); none: anywhere.

    A local root holds what lies below it once links and ".." are resolved (`os.path.realpath`, on the machine that
    checks: a link inside a root that points out of it is outside). A URI root holds the URIs below it, compared
    after resolving "." and ".." (`resolve_audio_path` resolved them already), with the scheme and host in lower
    case and, for http(s), percent-escapes decoded and the query left out. A root is a folder, never a prefix of a
    name: `s3://b/audio` holds `s3://b/audio/x.flac`, not `s3://b/audio-private/x.flac`. An fsspec chain
    (`simplecache::s3://...`) is outside every root: what it reads is the chain's to decide.
    """

    def __init__(self, roots: Iterable[str] = ()) -> None:
        self.roots = tuple(roots)
        self._local = [_folder(os.path.realpath(os.path.expanduser(path))) for path in
                       (local_path(root) for root in self.roots) if path is not None]
        self._remote = [_folder(_comparable_uri(root)) for root in self.roots if local_path(root) is None]

    def __bool__(self) -> bool:
        return bool(self.roots)

    def __reduce__(self) -> tuple[type, tuple[tuple[str, ...]]]:  # to a Ray task: resolved again where it runs
        return AudioRoots, (self.roots,)

    def problem(self, audio_uri: str) -> str | None:
        """None where `audio_uri` (as `resolve_audio_path` gives it) lies under a root, or there are none; else why
        not, naming the rule."""
        if not self.roots:
            return None
        local = local_path(audio_uri)
        if local is not None:
            real = os.path.realpath(os.path.expanduser(local))
            if any(_folder(real).startswith(root) for root in self._local):
                return None
            seen = f" (a link to {real})" if real != os.path.abspath(os.path.expanduser(local)) else ""
        elif _SCHEME.match(audio_uri):
            if any(_folder(_comparable_uri(audio_uri)).startswith(root) for root in self._remote):
                return None
            seen = ""
        else:
            seen = " (an fsspec chain: never inside a root)"
        return f"{audio_uri}{seen} lies outside --allowed-roots ({', '.join(self.roots)})"


def _folder(path: str) -> str:
    """A path or URI as the folder prefix that holds it and what lies below it: one "/" at its end."""
    return path.rstrip("/") + "/"


def _comparable_uri(uri: str) -> str:
    root, path, _, slash = _split_uri(uri)
    scheme, netloc = root.split("://", 1)
    if scheme.lower() in ("http", "https"):
        path = unquote(path)
    return f"{scheme.lower()}://{netloc.lower()}" + (_resolve_dots(path) if slash else "")
