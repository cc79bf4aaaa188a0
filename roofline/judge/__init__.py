"""The end-to-end judge's library: aiconfigurator-core's measured vLLM runs (`silicon_sample.csv`) read as
simulator inputs (`rows`), the checks of a measured row (`checks`), the peer estimator (`peer`) and the TTFT-gap
diagnosis (`ttft_gap`). The judge itself is `benchmarks/accuracy/e2e_accuracy.py`; serving never imports this
package, and nothing here is fitted on the file (a judge only)."""
