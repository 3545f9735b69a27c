"""Datasets in object storage (s3://, gs://, az://, https://) read through a local cache."""
