"""Column names and the output Parquet schema: every stage reads names from here.

Input rows (from manifests) carry the identifying columns; the output adds the transcript, the words with
their times, the outcome and how the result was made.
"""

from __future__ import annotations

import pyarrow as pa

# identifying columns, present from the manifest reader on
UTTERANCE_ID = "utterance_id"  # stable across reruns: the exactly-once key
MANIFEST = "manifest"  # URI of the manifest the row came from
LINE = "line"  # 1-based line of that manifest
AUDIO_FILEPATH = "audio_filepath"  # resolved URI or path of the audio
OFFSET = "offset"  # seconds into the audio file
DURATION = "duration"  # seconds of audio (from the manifest)
REFERENCE_TEXT = "reference_text"  # the manifest's `text`, if any
EXTRA = "extra"  # JSON of the manifest keys loopscribe does not use, kept for the user

# outcome
STATUS = "status"  # STATUS_OK or STATUS_ERROR
ERROR = "error"  # why a row failed, naming the file and line; empty when ok
STATUS_OK = "ok"
STATUS_ERROR = "error"

# results
TEXT = "text"
WORDS = "words"  # list of {word, start, end, confidence}, seconds from the start of the utterance
MODEL = "model"
DECODING = "decoding"

WORD_TYPE = pa.struct([
    pa.field("word", pa.string()),
    pa.field("start", pa.float64()),
    pa.field("end", pa.float64()),
    pa.field("confidence", pa.float32()),
])

# columns that exist only between stages
SAMPLES = "samples"  # float32 waveform at the model's rate (audio stage -> ASR stage)
AUDIO_S = "audio_s"  # seconds of audio actually decoded
PADDED_S = "padded_s"  # this row's share of its encoder batch's padded seconds
TOKENS = "tokens"
TOKEN_FRAMES = "token_frames"
TOKEN_DURATIONS = "token_durations"  # TDT only
SCORE = "score"
CTC_LOG_PROBS = "ctc_log_probs"  # float16 bytes of [T', V] (a writer-stage search: ctc_beam)
CTC_FRAMES = "ctc_frames"  # original frame of each of the T' frames (likewise)

# the summary row the writer stage returns per committed part
PART = "part"
ROWS, ROWS_OK, ROWS_ERROR = "rows", "rows_ok", "rows_error"
FINISH_S = "finish_s"  # seconds the writer spent on the part
COMMITTED_AT = "committed_at"  # Unix time the part was committed

INPUT_COLUMNS = (UTTERANCE_ID, MANIFEST, LINE, AUDIO_FILEPATH, OFFSET, DURATION, REFERENCE_TEXT, EXTRA, STATUS, ERROR)

OUTPUT_SCHEMA = pa.schema([
    pa.field(UTTERANCE_ID, pa.string(), nullable=False),
    pa.field(MANIFEST, pa.string()),
    pa.field(LINE, pa.int64()),
    pa.field(AUDIO_FILEPATH, pa.string()),
    pa.field(OFFSET, pa.float64()),
    pa.field(DURATION, pa.float64()),
    pa.field(REFERENCE_TEXT, pa.string()),
    pa.field(EXTRA, pa.string()),
    pa.field(TEXT, pa.string()),
    pa.field(WORDS, pa.list_(WORD_TYPE)),
    pa.field(STATUS, pa.string(), nullable=False),
    pa.field(ERROR, pa.string()),
    pa.field(MODEL, pa.string()),
    pa.field(DECODING, pa.string()),
])
