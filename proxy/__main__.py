from proxy.cli.main import main

raise SystemExit(main())
