"""Column names and the output Parquet schema: every stage reads names from here.

Input rows (from manifests) carry the identifying columns; the output adds the transcript, the words with
their times, the outcome and how the result was made.
"""

from __future__ import annotations

import pyarrow as pa

# identifying columns, present from the manifest reader on
# the exactly-once key: a hash of the utterance's content (audio URI, offset, duration, channel, and the manifest's
# own id where it gives one), never of where the manifest lists it, so edited and re-sorted manifests resume right
UTTERANCE_ID = "utterance_id"
ROW_IDENTITY = "content-v1"  # how utterance ids are made; an output made another way is refused (sink.py)
MANIFEST = "manifest"  # URI of the manifest the row came from
LINE = "line"  # 1-based line of that manifest
SOURCE_ID = "source_id"  # the manifest's own id of the utterance (Lhotse cut id, a NeMo `id`), if any
AUDIO_FILEPATH = "audio_filepath"  # resolved URI or path of the audio
OFFSET = "offset"  # seconds into the audio file
DURATION = "duration"  # seconds of audio (from the manifest)
CHANNEL = "channel"  # the audio channel to decode; null: all channels mixed down
REFERENCE_TEXT = "reference_text"  # the manifest's `text`, if any
EXTRA = "extra"  # JSON of the manifest keys loopscribe does not use, kept for the user
# the row's own phrase list to boost (a NeMo line's `phrases`, a Lhotse cut's `custom.phrases`), checked and
# normalised by the manifest reader: [{text, weight}] (weight null: the default context score); null: none.
# Also kept, as written, in `extra`
PHRASES = "phrases"
# the member of a tar shard that holds the row's audio (`audio_filepath` is then the shard; pipeline/io/shards.py);
# null for a loose file
SHARD_MEMBER = "shard_member"

# outcome
STATUS = "status"  # STATUS_OK or STATUS_ERROR
ERROR = "error"  # why a row failed, naming the file and line; empty when ok
STATUS_OK = "ok"
STATUS_ERROR = "error"

# results
AUDIO_DURATION = "audio_duration"  # seconds of audio decoded, measured (the manifest's `duration` may be wrong)
# seconds of the whole audio file from offset 0 (its header, or where decoding found its end); null where unknown. A
# manifest `duration` shorter than the file is transcribed as the manifest says, and counted (graph.output_totals)
FILE_DURATION = "file_duration"
TEXT = "text"
CONFIDENCE = "confidence"  # the utterance's: the aggregate of its words' confidences; null where not asked
WORDS = "words"  # list of {word, start, end, confidence}, seconds from the start of the utterance
MODEL = "model"
DECODING = "decoding"
# a row longer than long_audio.chunk_s cut by voice activity (long_audio.segment vad): its speech segments, a list of
# {start, end} in seconds from the start of the row (what was decoded; the rest was not), and the share of the row's
# seconds they cover; null for a row decoded whole or cut otherwise (pauses, none). pipeline/stages/segments.py
SPEECH_SEGMENTS = "speech_segments"
SPEECH_SHARE = "speech_share"
# decoding.head_agreement (a hybrid model): the other head's greedy text, and the share of the chosen text's words
# it agrees with (1 - their word error rate, floored at 0); null where not asked
SECOND_HEAD_TEXT = "second_head_text"
HEAD_AGREEMENT = "head_agreement"

PHRASE_TYPE = pa.struct([pa.field("text", pa.string()), pa.field("weight", pa.float64())])

SEGMENT_TYPE = pa.struct([pa.field("start", pa.float64()), pa.field("end", pa.float64())])
WORD_TYPE = pa.struct([
    pa.field("word", pa.string()),
    pa.field("start", pa.float64()),
    pa.field("end", pa.float64()),
    pa.field("confidence", pa.float32()),
])

# columns that exist only between stages
SAMPLES = "samples"  # float32 waveform at the model's rate (audio stage -> ASR stage)
AUDIO_S = "audio_s"  # seconds of audio actually decoded
ENERGIES = "energies"  # chunked_read rows: energy (dB) of each 10 ms, where LoadAudio found the pauses
CHUNKED_READ = "chunked_read"  # a long row whose audio the ASR stage reads chunk by chunk (LoadAudio carries none)
# a row cut by voice activity: its segments' [start, end) in samples at the model's rate, flattened (s0, e0, s1, ...),
# and where its `samples` hold only the speech, the recording's sample ranges they hold, in order (flattened alike)
SPEECH_RANGES = "speech_ranges"
INLINE_RANGES = "inline_ranges"
PADDED_S = "padded_s"  # this row's share of its encoder batch's padded seconds
TOKENS = "tokens"
TOKEN_FRAMES = "token_frames"
TOKEN_DURATIONS = "token_durations"  # TDT only
SCORE = "score"
TOKEN_CONFIDENCE = "token_confidence"  # per token, where the plan asks for confidence
CTC_LOG_PROBS = "ctc_log_probs"  # float16 bytes of [T', V] (a writer-stage search: ctc_beam)
CTC_FRAMES = "ctc_frames"  # original frame of each of the T' frames (likewise)
SECOND_TOKENS = "second_tokens"  # decoding.head_agreement: the other head's tokens

# the summary row the writer stage returns per committed part
PART = "part"
ROWS, ROWS_OK, ROWS_ERROR = "rows", "rows_ok", "rows_error"
FINISH_S = "finish_s"  # seconds the writer spent on the part (waiting for its model's layout left out)
COMMITTED_AT = "committed_at"  # Unix time the part was committed

# Busy seconds: the wall time a stage's worker spent on a call (waiting for its model to load left out), shared
# equally among the call's rows. Rows carry them from stage to stage, and the writer sums them into its part's
# summary row: never into the output. The ASR stage's are split: the encoder (padding, features, encoder) and
# decoding (the search and everything else the ASR actor does with the call); the writer's is FINISH_S.
READ_BUSY_S = "read_busy_s"
AUDIO_BUSY_S = "audio_busy_s"
ENCODER_BUSY_S = "encoder_busy_s"
DECODING_BUSY_S = "decoding_busy_s"
BUSY_S_BY_STAGE = {"reading": READ_BUSY_S, "audio": AUDIO_BUSY_S, "encoder": ENCODER_BUSY_S,
                   "decoding": DECODING_BUSY_S, "writing": FINISH_S}

INPUT_COLUMNS = (UTTERANCE_ID, MANIFEST, LINE, SOURCE_ID, AUDIO_FILEPATH, SHARD_MEMBER, OFFSET, DURATION, CHANNEL,
                 REFERENCE_TEXT, EXTRA, PHRASES, STATUS, ERROR)

_TYPES = {  # every column that rows carry from the manifests to the output, and its Arrow type
    UTTERANCE_ID: pa.string(), MANIFEST: pa.string(), LINE: pa.int64(), SOURCE_ID: pa.string(),
    AUDIO_FILEPATH: pa.string(), SHARD_MEMBER: pa.string(), OFFSET: pa.float64(), DURATION: pa.float64(),
    CHANNEL: pa.int64(),
    AUDIO_DURATION: pa.float64(), FILE_DURATION: pa.float64(), REFERENCE_TEXT: pa.string(), EXTRA: pa.string(),
    TEXT: pa.string(),
    WORDS: pa.list_(WORD_TYPE), CONFIDENCE: pa.float64(), SECOND_HEAD_TEXT: pa.string(), HEAD_AGREEMENT: pa.float64(),
    SPEECH_SEGMENTS: pa.list_(SEGMENT_TYPE), SPEECH_SHARE: pa.float64(),
    STATUS: pa.string(), ERROR: pa.string(), MODEL: pa.string(), DECODING: pa.string(),
    PHRASES: pa.list_(PHRASE_TYPE),  # between stages only: the output keeps the manifest's `phrases` in `extra`
}
_REQUIRED = (UTTERANCE_ID, STATUS)  # never null in the output

# the rows manifests yield (manifest.py) and every stage passes on
INPUT_SCHEMA = pa.schema([pa.field(name, _TYPES[name]) for name in INPUT_COLUMNS])

OUTPUT_SCHEMA = pa.schema([
    pa.field(name, _TYPES[name], nullable=name not in _REQUIRED)
    for name in (UTTERANCE_ID, MANIFEST, LINE, SOURCE_ID, AUDIO_FILEPATH, SHARD_MEMBER, OFFSET, DURATION, CHANNEL,
                 AUDIO_DURATION, FILE_DURATION, REFERENCE_TEXT, EXTRA, TEXT, WORDS, CONFIDENCE, SECOND_HEAD_TEXT,
                 HEAD_AGREEMENT, SPEECH_SEGMENTS, SPEECH_SHARE, STATUS, ERROR, MODEL, DECODING)
])
