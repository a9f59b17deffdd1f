from flowrl.benchmarks.perf.overhead import main

main()
