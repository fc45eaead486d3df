fn main() {
    for crd in dlq_operator::crd::all_crds() {
        print!("{}", dlq_operator::crd::crd_yaml(&crd).unwrap());
    }
}
