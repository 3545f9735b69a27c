"""Tests against a real S3-protocol server (moto, as a child process) and the loopback proxy."""
