from apcir.cli.main import main

main()
