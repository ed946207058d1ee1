# ReflectRM workbench. CPU image by default; `--build-arg VARIANT=cuda` adds CUDA and vLLM.
#   docker build -t reflectrm .                      # CPU, the demo judge
#   docker build -t reflectrm:cuda --build-arg VARIANT=cuda .
#   docker run -p 7860:7860 -v reflectrm-data:/data reflectrm
# The install steps are the README's, so CI (which runs them) exercises this file's steps too.
ARG VARIANT=cpu
FROM python:3.11-slim AS base-cpu
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04 AS base-cuda
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \
    && rm -rf /var/lib/apt/lists/* && ln -sf /usr/bin/python3 /usr/local/bin/python

FROM base-${VARIANT}
ARG VARIANT=cpu
ENV GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false \
    REFLECTRM_DATABASE_URL=sqlite:////data/reflectrm.db PATH=/app/.venv/bin:$PATH
WORKDIR /app
COPY . /app
# README, first command: a virtual environment and the project with its extras.
RUN python3 -m venv .venv \
    && if [ "$VARIANT" = "cpu" ]; then \
         .venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -e '.[ui,train]'; \
       else \
         .venv/bin/pip install --no-cache-dir -e '.[ui,train]' 'vllm>=0.22,<0.32'; \
       fi
RUN mkdir -p /data
VOLUME /data
EXPOSE 7860
CMD ["reflectrm", "app", "--host", "0.0.0.0", "--port", "7860"]
