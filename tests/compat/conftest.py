"""The scripts and the sample-style suite in this folder import `neuronxcc.nki` / `nki` as NKI users write
them; they only import under `opennki run` or the pytest plugin, so the main run does not collect them."""

collect_ignore = ["tutorial", "samples_suite"]
