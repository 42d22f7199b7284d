"""What decoders and the pipeline agree on about a tokenizer's pieces, spelled once: SentencePiece's word-start
mark, which a piece that begins a word starts with (`▁rachel`, or a lone `▁` before the word's inner pieces).
Torch-free: the tokenizer adapters and the reading stages import it."""

WORD_START = "\u2581"
