#!/bin/sh
# The API function's handler: the Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap)
# runs this script, waits until GET $AWS_LWA_READINESS_CHECK_PATH answers on $AWS_LWA_PORT,
# then streams each function URL request to the app and its response back as it is written.
# Dependencies come from the layer (/opt/python), our code from this directory.
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="/opt/python:${HERE}${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m uvicorn --factory responses_gateway.api.app:create_app \
    --host 127.0.0.1 --port "${AWS_LWA_PORT:-8080}" \
    --no-access-log --log-level "$(echo "${GATEWAY_LOG_LEVEL:-warning}" | tr 'A-Z' 'a-z')" \
    --timeout-graceful-shutdown 5
