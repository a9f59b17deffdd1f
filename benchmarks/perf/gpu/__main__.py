from flowrl.benchmarks.perf.gpu.runner import main

main()
