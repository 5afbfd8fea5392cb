from responses_gateway.cli import main

raise SystemExit(main())
