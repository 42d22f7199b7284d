"""A folder of small files on any fsspec filesystem (local, s3://, gs://): what the jobs write beside their
Parquet output (reports, manifests, tuning steps, LMs). The Parquet parts themselves go through `sink.py`."""

from __future__ import annotations


class Folder:
    def __init__(self, uri: str) -> None:
        import fsspec

        self.uri = uri.rstrip("/")
        self.filesystem, self.root = fsspec.core.url_to_fs(self.uri)

    def child(self, *names: str) -> Folder:
        return Folder("/".join([self.uri, *names]))

    def uri_of(self, name: str) -> str:
        """The URI of the file `name` (may hold "/") in this folder, as users and other jobs address it."""
        return f"{self.uri}/{name}"

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def exists(self, name: str = "") -> bool:
        return self.filesystem.exists(self._path(name) if name else self.root)

    def read(self, name: str) -> str | None:
        """The file's text, or None where there is no such file."""
        path = self._path(name)
        return self.filesystem.cat_file(path).decode() if self.filesystem.exists(path) else None

    def write(self, name: str, data: str | bytes) -> None:
        path = self._path(name)
        self.filesystem.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.filesystem.pipe_file(path, data.encode() if isinstance(data, str) else data)

    def put(self, name: str, local_path: str) -> None:
        """Copy a local file in (an object store gets it in one upload)."""
        path = self._path(name)
        self.filesystem.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.filesystem.put_file(local_path, path)

    def folders(self) -> list[str]:
        """The names of the folders directly in this one, listed afresh (other processes add them)."""
        if not self.filesystem.exists(self.root):
            return []
        self.filesystem.invalidate_cache(self.root)
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.filesystem.ls(self.root, detail=False)
                      if self.filesystem.isdir(p))

    def remove(self) -> None:
        self.filesystem.rm(self.root, recursive=True)
