from headrace.broker.app.cli import main

main()
