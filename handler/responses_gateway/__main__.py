from responses_gateway.entry.cli import main

raise SystemExit(main())
