"""asv benchmarks of loaderx (discovered by asv through asv.conf.json's benchmark_dir)."""
