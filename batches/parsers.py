from api.parsers import LimitedJSONParser


class BatchJSONParser(LimitedJSONParser):
    """A batch body may be far larger than one job's: up to LLM_BATCH_MAX_REQUEST_BYTES."""

    limit_setting = "LLM_BATCH_MAX_REQUEST_BYTES"
