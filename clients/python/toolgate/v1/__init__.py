"""The toolgate.v1 messages and service stub, generated from proto/ when the package is built."""
