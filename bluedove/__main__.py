from bluedove.cli.main import main

main()
