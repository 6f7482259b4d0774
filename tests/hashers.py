"""A password hasher for the test process: Django's PBKDF2 with 1,000 iterations instead of a
million. Its hashes carry the algorithm name and the iteration count, so the web and worker
processes the tests start (with Django's default hashers) verify them as usual; they are only
cheap to make. Each test creates users, and a million iterations cost a test about half a
second of CPU on this machine."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
