"""A credential given in a URI, a `--config` file or the environment is never written or printed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa

from pipeline import schema
from pipeline.config import DecodingConfig, ModelConfig, ResourcesConfig, TranscribeJobConfig, config_from_dict
from pipeline.decoding.plan import describe, plan_decoding
from pipeline.io import sink
from pipeline.io.manifest import read_manifest
from pipeline.io.redact import redact, redact_values
from pipeline.model.nemo_file import read_model_facts
from pipeline.stages.asr import TranscribeBatch
from pipeline.stages.audio import LoadAudio
from pipeline.stages.write import FinishAndWrite
from tests.support.s3_server import moto_s3

REPOSITORY = Path(__file__).resolve().parents[3]
URI_SECRET = "FAKEuriSECRET7xq"
ENV_SECRET = "FAKEenvSECRET9kz"
QUERY_SECRET = "FAKEsigSECRET3mv"


def test_uris_lose_user_info_and_query_values_and_nothing_else():
    assert redact(f"s3://AKIA:{URI_SECRET}@bucket/a.wav") == "s3://***@bucket/a.wav"
    assert redact(f"cannot read https://h/x.wav?X-Amz-Signature={QUERY_SECRET}&b=2: 403") == (
        "cannot read https://h/x.wav?X-Amz-Signature=***&b=*** 403")
    for kept in ("s3://bucket/a@b.wav", "/data/x?y=1.wav", "file:///data/a#b?c=d.wav", "plain words ?a=b"):
        assert redact(kept) == kept
    assert redact_values({"a": [f"gs://u:{URI_SECRET}@b/x", 3], "b": (None, "x")}) == {
        "a": ["gs://***@b/x", 3], "b": (None, "x")}


def test_config_json_identity_and_decoding_column_hide_uri_credentials(tmp_path):
    config = config_from_dict({
        "manifests": [f"s3://AKIA:{URI_SECRET}@bucket/m.json"], "output": f"s3://AKIA:{URI_SECRET}@bucket/out",
        "model": {"uri": f"https://models.invalid/m.nemo?token={QUERY_SECRET}"},
        "decoding": {"lm_uri": f"s3://AKIA:{URI_SECRET}@bucket/lm.bin", "lm_weight": 0.5}})
    written = json.dumps([config.to_dict(), config.results_identity(), describe(config.decoding)])
    assert URI_SECRET not in written and QUERY_SECRET not in written
    assert "s3://***@bucket/lm.bin" in describe(config.decoding)


def test_error_rows_and_output_columns_hide_uri_and_environment_credentials(nemo_assets, tmp_path):
    """Rows whose audio is on S3 (moto on 127.0.0.1) behind a URI with credentials, or missing while the
    environment holds a secret key: the error rows name the files, and no secret reaches the output."""
    model = ModelConfig(uri=str(nemo_assets["checkpoints"]["tdt_ctc"]))
    plan = plan_decoding(read_model_facts(model.uri), DecodingConfig())
    manifest = tmp_path / "manifest.json"
    with moto_s3("bucket"):
        saved = os.environ["AWS_SECRET_ACCESS_KEY"]
        os.environ["AWS_SECRET_ACCESS_KEY"] = ENV_SECRET  # moto takes any key; the clients read this one
        try:
            manifest.write_text("".join(json.dumps({"audio_filepath": uri, "duration": 1.0}) + "\n" for uri in (
                "s3://bucket/missing.wav", f"s3://AKIA:{URI_SECRET}@bucket/x.wav",
                f"s3://bucket/y.wav?versionId={QUERY_SECRET}")))
            rows = pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)
            audio = LoadAudio(sample_rate=16000)(rows)
            decoded = TranscribeBatch(model, plan, ResourcesConfig())(audio)
            FinishAndWrite(model, plan, str(tmp_path / "out"), "m")(decoded)
        finally:
            os.environ["AWS_SECRET_ACCESS_KEY"] = saved
    table = sink.read_output(str(tmp_path / "out"))
    assert table.num_rows == 3 and set(table.column(schema.STATUS).to_pylist()) == {schema.STATUS_ERROR}
    written = json.dumps(table.to_pylist(), default=str)
    for secret in (URI_SECRET, ENV_SECRET, QUERY_SECRET):
        assert secret not in written, written
    errors = table.column(schema.ERROR).to_pylist()
    assert any("s3://bucket/missing.wav" in e for e in errors) and any("s3://***@bucket/x.wav" in e for e in errors)


def test_the_job_prints_no_credential_when_the_model_uri_fails(tmp_path):
    import subprocess

    run = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"),
                          "--model", f"s3://AKIA:{URI_SECRET}@bucket/m.nemo", "--output", str(tmp_path / "out"),
                          "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x",
                              "AWS_SECRET_ACCESS_KEY": ENV_SECRET, "AWS_EC2_METADATA_DISABLED": "true",
                              "AWS_MAX_ATTEMPTS": "1", "RAY_ADDRESS": ""})
    assert run.returncode != 0
    printed = run.stdout + run.stderr
    assert URI_SECRET not in printed and ENV_SECRET not in printed, printed[-2000:]
    assert "s3://***@bucket/m.nemo" in printed
    for path in (tmp_path / "out").glob("_*.json"):
        assert URI_SECRET not in path.read_text()


def test_a_job_config_round_trips_through_to_dict_without_secrets():
    config = TranscribeJobConfig(manifests=("a.json",))
    assert config_from_dict(config.to_dict()) == config  # no URI: nothing redacted, nothing lost
