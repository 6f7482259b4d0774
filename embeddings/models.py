"""The vectors of completed embedding jobs, kept compactly: float32, little-endian, in chunks.

An embedding job is an ``LlmJob`` of kind ``embedding`` (its texts in ``LlmJob.input``); its
vectors are written here in the transaction that completes it (``jobs.services.job_complete``),
``CHUNK_BYTES`` at most per row, so that no row nears MariaDB's ``max_allowed_packet`` (2,048
vectors of 3,072 dimensions are 25 MB). JSON text would be three to four times larger.
"""

from django.db import models

__all__ = ["EmbeddingChunk"]


class EmbeddingChunk(models.Model):
    job = models.ForeignKey("jobs.LlmJob", on_delete=models.CASCADE, related_name="+")
    start = models.PositiveIntegerField(help_text="The input index of its first vector.")
    count = models.PositiveIntegerField(help_text="Vectors in this chunk.")
    dimensions = models.PositiveIntegerField()
    vectors = models.BinaryField(help_text="count x dimensions float32, little-endian.")

    class Meta:
        ordering = ["job", "start"]
        constraints = [
            models.UniqueConstraint(fields=["job", "start"], name="unique_embedding_chunk_start")
        ]

    def __str__(self) -> str:
        return f"vectors {self.start}..{self.start + self.count - 1} of job {self.job_id}"
