"""The transcription job's stages: small callable classes that know nothing about Ray.

`pipeline/graph.py` wires them with Ray Data; a test builds one with a model and calls it with a
`pyarrow.Table`, no cluster needed. Rows flow through every stage whatever happens to them: a row that fails
(unreadable manifest line, missing or corrupt audio, a decoding error) gets `status = error` and an `error`
naming the manifest, line and cause, and is written like any other row. Nothing raises per row.

1. `ReadManifests` (CPU; `pipeline/stages/read.py`): manifest URIs -> one row per line, minus the rows an earlier
   run already committed.
2. `LoadAudio` (CPU; `pipeline/stages/audio.py`): fetch, decode, mix down, slice and resample each row's audio ->
   `samples`. A sharded corpus (docs/shards.md) has `ReadShards` (a task per shard with rows left) and `LoadShards`
   (`pipeline/stages/shards.py`: a shard per call, its tar streamed once, its members decoded by `LoadAudio`) instead.
3. `TranscribeBatch` (GPU, or CPU with fractional CPUs; `pipeline/stages/asr.py`): a window of rows -> length
   buckets -> encoder and decoding -> token ids with frames (or, where the plan has the writer search, compact
   blank-collapsed CTC log-probs).
4. `FinishAndWrite` (CPU; `pipeline/stages/write.py`): the writer's search where the plan has one (CTC beam
   search), detokenization and word timestamps, then one atomic Parquet part per batch (`pipeline/io/sink.py`) ->
   one summary row per part, which the driver counts.

Each stage is a module of its own so that a Ray worker imports only what its stage needs: the reading stages
import neither torch nor NeMo (a CPU actor starts in a fraction of the time, beside an ASR actor that is
importing NeMo, and holds a few hundred MB less), the writer imports torch but not NeMo, and only the ASR stage
loads the model. `pipeline/stages/rows.py` holds what they share. Each stage class also says what its workers
reserve (CPUs, GPUs) and, where it is not a setting, how many run at once; `pipeline/graph.py` reads it there.

Both decoding stages get the job's `DecodingPlan` (`pipeline/decoding/plan.py`), made once by the driver, and read
every decoding decision from it. Column names come from `pipeline/schema.py`.

The mel preprocessor runs in stage 3 with the encoder, as NeMo runs it: on a GPU it costs a few percent of the
encoder, and it belongs to the checkpoint (its config and window), which only stage 3 loads. Audio fetching,
decoding and resampling, detokenization and CTC beam search run in CPU stages, so GPU actors never wait on them.

Dims: B batch, S samples, T encoder frames, T' frames after blank collapse, V labels with blank.
"""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "asr": ("TranscribeBatch",),
    "audio": ("LoadAudio",),
    "bucketing": ("padded_seconds", "padding_efficiency", "plan_batches"),
    "chunks": ("check_attention",),
    "read": ("ReadManifests", "ReadShards"),
    "rows": ("RunTotals", "summarize"),
    "shards": ("LoadShards",),
    "write": ("FinishAndWrite",),
})
