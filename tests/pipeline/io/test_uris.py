"""Where audio may come from (`pipeline/io/uris.py::AudioRoots`, `--allowed-roots`): a local root holds what lies
below it once ".." and links are resolved, a URI root what lies below it once ".." and (http) percent-escapes are,
and a root is a folder, never a prefix of a name."""

from __future__ import annotations

import os
import pickle

from pipeline.io.uris import AudioRoots, resolve_audio_path


def test_no_roots_allow_everything():
    roots = AudioRoots()
    assert not roots
    assert roots.problem("/etc/passwd") is None and roots.problem("https://anywhere/x.wav") is None


def test_a_local_root_holds_its_files_and_not_what_dots_or_links_reach(tmp_path):
    audio, elsewhere = tmp_path / "audio", tmp_path / "private"
    audio.mkdir()
    elsewhere.mkdir()
    (audio / "a.wav").write_bytes(b"")
    (elsewhere / "secret.wav").write_bytes(b"")
    os.symlink(elsewhere / "secret.wav", audio / "link.wav")
    (tmp_path / "audio-private").mkdir()
    roots = AudioRoots([str(audio)])
    assert roots.problem(str(audio / "a.wav")) is None
    assert roots.problem(f"file://{audio / 'a.wav'}") is None
    dots = resolve_audio_path("../private/secret.wav", str(audio / "manifest.json"))
    assert dots == str(elsewhere / "secret.wav")
    problem = roots.problem(dots)
    assert problem == f"{dots} lies outside --allowed-roots ({audio})"
    assert roots.problem(f"{audio}/../private/secret.wav") is not None  # unresolved dots too
    link = roots.problem(str(audio / "link.wav"))
    assert link == f"{audio / 'link.wav'} (a link to {elsewhere / 'secret.wav'}) lies outside --allowed-roots ({audio})"
    assert roots.problem(str(tmp_path / "audio-private" / "x.wav")) is not None  # a folder, not a name prefix


def test_a_root_reached_through_a_link_holds_the_files_below_it(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "data")
    roots = AudioRoots([str(tmp_path / "data")])
    assert roots.problem(str(real / "a.wav")) is None
    assert roots.problem(str(tmp_path / "data" / "a.wav")) is None


def test_uri_roots_hold_what_lies_below_them():
    roots = AudioRoots(["s3://bucket/audio", "https://Host.example/corpus/"])
    assert roots.problem("s3://bucket/audio/x.flac") is None
    assert roots.problem(resolve_audio_path("s3://bucket/audio/../secret/x.flac", "s3://bucket/m.json")) is not None
    assert roots.problem("s3://bucket/audio-private/x.flac") is not None
    assert roots.problem("s3://other/audio/x.flac") is not None
    assert roots.problem("gs://bucket/audio/x.flac") is not None
    assert roots.problem("https://host.example/corpus/a.wav?X-Amz-Signature=abc") is None
    assert roots.problem("HTTPS://HOST.EXAMPLE/corpus/a.wav") is None
    # a server decodes %2e%2e into "..": so is the check
    assert roots.problem("https://host.example/corpus/%2e%2e/admin/a.wav") is not None
    assert roots.problem("/corpus/a.wav") is not None  # a local path is under no URI root


def test_an_fsspec_chain_is_under_no_root_and_the_message_names_the_rule():
    problem = AudioRoots(["s3://bucket/audio"]).problem("simplecache::s3://bucket/audio/x.flac")
    assert problem is not None and "fsspec chain" in problem and "--allowed-roots (s3://bucket/audio)" in problem


def test_roots_travel_to_a_ray_task_as_their_names(tmp_path):
    roots = pickle.loads(pickle.dumps(AudioRoots([str(tmp_path)])))
    assert roots.roots == (str(tmp_path),) and roots.problem(str(tmp_path / "a.wav")) is None
