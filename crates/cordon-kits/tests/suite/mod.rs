mod conformance;
