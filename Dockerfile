# Two targets: `service`, the image of every streaming Zeitgeist service (docker-compose.yml picks the command
# `python -m services.<name>`), and `batch` (below). Build: docker build --target service -t mwcore/zeitgeist .
# The `batch` target adds Java and PySpark for the model job (services.model_trainer).
FROM python:3.11-slim AS service

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# The library first: its layer is rebuilt only when the library changes.
COPY libs/mwcore /app/libs/mwcore
RUN pip install /app/libs/mwcore

COPY services/requirements.txt /app/services/requirements.txt
RUN pip install -r /app/services/requirements.txt
COPY schemas /app/schemas
COPY services /app/services

# Run as an unprivileged user; /data holds the query logs (a volume in compose).
RUN useradd --uid 10001 --create-home mw && mkdir -p /data/querylogs && chown -R mw /data
USER mw

ENV PYTHONPATH=/app \
    MW_SCHEMAS_DIR=/app/schemas \
    MW_METRICS_PORT=9108
EXPOSE 9108
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9108/healthz', timeout=3)"
CMD ["python", "-m", "services.windower"]

FROM service AS batch
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && pip install "/app/libs/mwcore[spark]"
USER mw
ENV PYSPARK_PYTHON=python
HEALTHCHECK NONE
CMD ["python", "-m", "services.model_trainer"]
