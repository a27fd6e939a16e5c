from kbench.cli import main

main()
