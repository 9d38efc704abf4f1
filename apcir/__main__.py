from apcir.cli import main

main()
