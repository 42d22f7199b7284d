"""Train the SentencePiece BPE tokenizer on the training text, in the folder layout NeMo expects.

    python make_tokenizer.py --text /root/loopscribe-data/text/train.txt --vocab-size 256 \
        --out /root/loopscribe-data/tokenizer_bpe256

The folder gets tokenizer.model, tokenizer.vocab and vocab.txt (NeMo's own `create_spt_model`).
"""

import argparse
import json

from nemo.collections.common.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer, create_spt_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", default="/root/loopscribe-data/text/train.txt")
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--out", default="/root/loopscribe-data/tokenizer_bpe256")
    args = parser.parse_args()

    model_path, _ = create_spt_model(
        args.text, args.vocab_size, sample_size=-1, do_lower_case=True, tokenizer_type="bpe", output_dir=args.out
    )
    tokenizer = SentencePieceTokenizer(model_path)
    lines = open(args.text).read().splitlines()[:2000]
    tokens = sum(len(tokenizer.text_to_ids(line)) for line in lines)
    chars = sum(len(line) for line in lines)
    print(json.dumps({"model": model_path, "vocab_size": tokenizer.vocab_size,
                      "chars_per_token": round(chars / tokens, 2)}))


if __name__ == "__main__":
    main()
