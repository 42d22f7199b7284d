"""Token-level n-gram LMs: ARPA reading (`arpa`), the LM as tensors with the torch `advance` (`tensors`),
compiling ARPA n-grams to tensors (`compile`), the memory-mapped binary file (`binary`), the runtime LM
`NgramLm` (`lm`), the Triton kernel (`triton`), and building LMs from text (`build`)."""

from decoders.exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "arpa": (
        "ArpaFormatError", "ArpaNgram", "BOS_ID", "EOS_ID", "KENLM_MISSING_UNK_LOG10", "TOKEN_OFFSET", "UNK_ID",
        "add_missing_prefixes", "id_to_token", "iter_arpa", "open_text", "read_arpa", "write_arpa",
    ),
    "binary": ("NgramFileError", "load_tensors"),
    "compiled": ("fill_row",),
    "lm": ("NgramLm",),
    "tensors": ("EMPTY_STATE", "NgramTensors", "dispatch_advance", "triton_failure", "walk_torch"),
    "word_lm": ("arpa_level", "read_word_arpa", "sample_word_sentences", "spell_word_lm"),
})
