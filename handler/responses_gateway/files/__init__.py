"""The Files API's storage: file bytes (a :class:`~.store.Blobs`) and file records (a
:class:`~.store.FileRecords`), locally on disk and in SQLite, in AWS in S3 and DynamoDB.

:class:`~.service.Files` is what the routes and the vector stores use; ``build.py`` picks the
engines from ``GATEWAY_STORE`` and ``GATEWAY_FILES_BUCKET``."""
