from harness.esgd.app import main

main()
