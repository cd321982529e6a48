from evolver.cli import main

main()
