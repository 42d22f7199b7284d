#!/usr/bin/env bash
# Carry the demo-model recipe to a GPU machine that has PyTorch but no network and no espeak-ng:
#   ./offline_bundle.sh make DIR      here (network to PyPI, espeak-ng installed, the corpus text and tokenizer built):
#                                     NeMo's wheels for the target's Python ($PY_VERSION, default 3.12), espeak-ng with
#                                     the libraries it links and its data, the training text and the tokenizer (~40 MB)
#   ./offline_bundle.sh install DIR   there, as root: wheels into $SITE (default /tmp/site; then export PYTHONPATH=$SITE),
#                                     espeak-ng into /opt/espeak + /usr/local/bin, text and tokenizer into $DATA
# Then `./run.sh gpu-audio` and `./run.sh gpu-train` (docs/demo_model.md, "Training on a GPU").
set -euo pipefail

DATA="${DATA:-/root/loopscribe-data}"
SITE="${SITE:-/tmp/site}"
# NeMo 3.0.0's ASR imports and what they import that a PyTorch image lacks, at the versions the CPU run uses;
# lightning is pinned because NeMo 3.0 asks for <= 2.4.0
WHEELS="nemo-toolkit==3.0.0 lightning==2.4.0 hydra-core==1.3.2 omegaconf==2.3.0 lhotse==1.33.0 librosa==0.11.0
audioread==3.1.0 pooch==1.9.0 platformdirs==4.14.7 decorator==5.3.1 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12
soxr==1.1.0 braceexpand==0.1.7 webdataset==1.0.2 kaldialign==0.12.0 cytoolz==1.2.0 intervaltree==3.2.1
datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 httpx2==2.16.2 httpcore2==2.16.2 nv-one-logger-core==2.3.1
nv-one-logger-pytorch-lightning-integration==2.3.1 nv-one-logger-training-telemetry==2.3.1 pydantic==2.14.3
pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 smart-open==9.0.2 truststore==0.10.5
text-unidecode==1.3 text2num==3.1.0 indic-numtowords==1.1.0 whisper-normalizer==0.1.15 more-itertools==11.2.1
tenacity==9.2.1 strenum==0.4.15 overrides==7.7.0 toml==0.10.2 sniffio==1.3.1 distro==1.9.0 msgspec==0.22.0
jiwer==4.0.0 rapidfuzz==3.14.6"
SDIST_ONLY="antlr4-python3-runtime==4.9.3"  # pure Python, published as an sdist only: built into a wheel here

case "${1:-}" in
  make)
    dir="${2:?DIR}"
    mkdir -p "$dir/wheels" "$dir/data"
    platforms=()
    for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
      platforms+=(--platform "${p}_x86_64")
    done
    for wheel in $WHEELS; do
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" \
        --implementation cp "${platforms[@]}" -d "$dir/wheels" "$wheel"
    done
    python3 -m pip wheel -q --no-deps -w "$dir/wheels" $SDIST_ONLY
    staging="$(mktemp -d)"
    mkdir -p "$staging/opt/espeak/lib" "$staging/usr/lib/x86_64-linux-gnu" "$staging/usr/local/bin"
    cp /usr/bin/espeak-ng "$staging/opt/espeak/espeak-ng.bin"
    for lib in $(ldd /usr/bin/espeak-ng | awk '/=>/ {print $3}'); do
      case "$(basename "$lib")" in libc.so*|libm.so*|ld-linux*) ;; *) cp -L "$lib" "$staging/opt/espeak/lib/" ;; esac
    done
    cp -r /usr/lib/x86_64-linux-gnu/espeak-ng-data "$staging/usr/lib/x86_64-linux-gnu/"  # synthesize.py reads voices there
    printf '#!/bin/sh\nLD_LIBRARY_PATH=/opt/espeak/lib exec /opt/espeak/espeak-ng.bin "$@"\n' > "$staging/usr/local/bin/espeak-ng"
    chmod +x "$staging/usr/local/bin/espeak-ng"
    tar czf "$dir/espeak.tgz" -C "$staging" opt usr
    rm -rf "$staging"
    mkdir -p "$dir/data/text"
    cp "$DATA/text/train.txt" "$DATA/text/dev.txt" "$dir/data/text/"
    cp -r "$DATA/tokenizer_bpe256" "$dir/data/"
    du -sh "$dir"
    ;;
  install)
    dir="${2:?DIR}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$dir"/wheels/*.whl
    # the image's numba-cuda (NeMo's GPU RNN-T loss) still names np.row_stack, which NumPy 2.5 removed: on such an image
    # an alias, loaded at interpreter start from $SITE (seen on a PyTorch 2.11 / NumPy 2.5.2 image)
    python3 -c "import numpy, sys; sys.exit(hasattr(numpy, 'row_stack'))" &&
      echo "import numpy; numpy.row_stack = getattr(numpy, 'row_stack', numpy.vstack)" > "$SITE/sitecustomize.py"
    tar xzf "$dir/espeak.tgz" -C /
    mkdir -p "$DATA"
    cp -r "$dir/data/." "$DATA/"
    espeak-ng --version
    ;;
  *)
    sed -n '2,9p' "$0"; exit 2 ;;
esac
