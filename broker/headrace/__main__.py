from headrace.broker.cli import main

main()
